// Response schemas of the SDK flag endpoints (/flags, /decide) and local evaluation.
import { nullableString, openObject, record, stringArray } from '../http/schemas.ts';

// What `config=true` (and /decide v3) adds to either shape.
const configProperties = {
  config: openObject(),
  supportedCompression: stringArray,
  sessionRecording: { type: 'boolean' },
  surveys: { type: 'boolean' },
  heatmaps: { type: 'boolean' },
  siteApps: { type: 'array', items: openObject() },
  toolbarParams: openObject(),
  isAuthenticated: { type: 'boolean' },
  capturePerformance: { type: 'boolean' },
  autocapture_opt_out: { type: 'boolean' },
  autocaptureExceptions: { type: 'boolean' },
  elementsChainAsString: { type: 'boolean' },
};
const configOnly = { optional: Object.keys(configProperties) };

const flagDetail = record({
  key: { type: 'string' },
  enabled: { type: 'boolean' },
  variant: nullableString,
  reason: record({
    code: { type: 'string' },
    condition_index: { type: ['integer', 'null'] },
    description: { type: 'string' },
  }),
  metadata: record(
    {
      id: { type: 'integer' },
      version: { type: 'integer' },
      payload: { type: 'string', description: 'The payload as a JSON string; absent without one' },
      description: { type: 'null' },
    },
    { optional: ['payload'] },
  ),
});

/** v=2 (and /decide v=4): details per flag. v=1 (and /decide v=3): values and payloads per flag key. */
export const flagsResponseSchema = {
  oneOf: [
    record(
      {
        flags: { type: 'object', description: 'By flag key', additionalProperties: flagDetail },
        errorsWhileComputingFlags: { type: 'boolean' },
        requestId: { type: 'string' },
        ...configProperties,
      },
      configOnly,
    ),
    record(
      {
        featureFlags: {
          type: 'object',
          description: 'Variant key, or whether enabled',
          additionalProperties: { type: ['string', 'boolean'] },
        },
        featureFlagPayloads: {
          type: 'object',
          description: 'Payloads as JSON strings',
          additionalProperties: { type: 'string' },
        },
        errorsWhileComputingFlags: { type: 'boolean' },
        ...configProperties,
      },
      configOnly,
    ),
  ],
};

export const localEvaluationSchema = record({
  flags: {
    type: 'array',
    items: record({
      id: { type: 'integer' },
      team_id: { type: 'integer' },
      name: { type: 'string' },
      key: { type: 'string' },
      filters: openObject('Release conditions and variants'),
      deleted: { type: 'boolean' },
      active: { type: 'boolean' },
      ensure_experience_continuity: { type: 'boolean' },
      version: { type: 'integer' },
      evaluation_runtime: { type: 'string' },
    }),
  },
  group_type_mapping: { type: 'object', additionalProperties: { type: 'string' } },
  cohorts: openObject('Cohort definitions by id'),
});
