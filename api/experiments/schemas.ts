// Request schemas of the experiment routes; the handlers' types are derived from them.
import type { FromSchema } from 'json-schema-to-ts';
import { PAGE_QUERY_PROPERTIES } from '../http/pagination.ts';
import { GUARDRAIL_DIRECTIONS } from '../../shared/experiments/index.ts';
import { CORRECTION_METHODS } from '../../shared/experiments/index.ts';

/** stats_config: PostHog's keys pass through; the ones our engine reads are checked here. */
const statsConfig = {
  type: ['object', 'null'],
  additionalProperties: true,
  properties: {
    cuped: {
      type: ['object', 'null'],
      additionalProperties: false,
      properties: {
        enabled: { type: 'boolean' },
        lookback_days: { type: 'integer', minimum: 1, maximum: 30 },
      },
    },
    sequential: {
      type: ['object', 'null'],
      additionalProperties: false,
      properties: {
        enabled: { type: 'boolean' },
        tuning_parameter: { type: 'integer', minimum: 100, maximum: 1_000_000_000 },
      },
    },
    multiple_comparison_correction: {
      type: ['object', 'null'],
      additionalProperties: false,
      required: ['method'],
      properties: {
        method: { enum: CORRECTION_METHODS },
        scope: { enum: ['experiment', 'metric'] },
        primary_alpha_share: { type: 'number', exclusiveMinimum: 0, exclusiveMaximum: 1 },
      },
    },
    guardrails: {
      type: ['array', 'null'],
      maxItems: 20,
      items: {
        type: 'object',
        additionalProperties: false,
        required: ['metric_uuid', 'direction', 'tolerated_harm'],
        properties: {
          metric_uuid: { type: 'string', minLength: 1, maxLength: 200 },
          direction: { enum: GUARDRAIL_DIRECTIONS },
          tolerated_harm: { type: 'number', exclusiveMinimum: 0, exclusiveMaximum: 1 },
          min_exposures: { type: 'integer', minimum: 2, maximum: 100_000_000 },
        },
      },
    },
    circuit_breaker: {
      type: ['object', 'null'],
      additionalProperties: false,
      required: ['enabled'],
      properties: { enabled: { type: 'boolean' } },
    },
  },
} as const;

const writableProperties = {
  name: { type: 'string', minLength: 1, maxLength: 400 },
  description: { type: ['string', 'null'], maxLength: 3000 },
  start_date: { type: ['string', 'null'], format: 'date-time' },
  end_date: { type: ['string', 'null'], format: 'date-time' },
  feature_flag_key: { type: 'string', minLength: 1, maxLength: 400 },
  holdout_id: { type: ['integer', 'null'] },
  parameters: { type: ['object', 'null'], additionalProperties: true },
  secondary_metrics: { type: ['array', 'null'], items: {} },
  saved_metrics_ids: {},
  filters: { type: ['object', 'null'], additionalProperties: true },
  archived: { type: 'boolean' },
  deleted: { type: 'boolean' },
  type: { enum: ['web', 'product', null] },
  exposure_criteria: { type: ['object', 'null'], additionalProperties: true },
  metrics: { type: ['array', 'null'], maxItems: 50, items: {} },
  metrics_secondary: { type: ['array', 'null'], maxItems: 50, items: {} },
  stats_config: statsConfig,
  _create_in_folder: { type: 'string', maxLength: 400 },
  conclusion: { enum: ['won', 'lost', 'inconclusive', 'stopped_early', 'invalid', null] },
  conclusion_comment: { type: ['string', 'null'], maxLength: 10_000 },
  primary_metrics_ordered_uuids: { type: ['array', 'null'], items: {} },
  secondary_metrics_ordered_uuids: { type: ['array', 'null'], items: {} },
} as const;

export const listQuery = {
  type: 'object',
  properties: {
    ...PAGE_QUERY_PROPERTIES,
    status: { type: 'string', maxLength: 20 },
    search: { type: 'string', maxLength: 400 },
    created_by_id: { type: 'integer' },
    archived: { type: 'string', maxLength: 10 },
    order: { type: 'string', maxLength: 40 },
  },
} as const;
export type ListQuery = FromSchema<typeof listQuery>;

export const createBody = {
  type: 'object',
  required: ['name', 'feature_flag_key'],
  properties: writableProperties,
  examples: [{ name: 'Checkout test', feature_flag_key: 'checkout-test' }],
} as const;
export type CreateBody = FromSchema<typeof createBody>;

export const updateBody = { type: 'object', properties: writableProperties } as const;
export type UpdateBody = FromSchema<typeof updateBody>;

/** PUT: a full update (DRF's partial=False) needs the fields a create needs; it changes what it names, as PATCH. */
export const replaceBody = { ...updateBody, required: createBody.required } as const;

export const duplicateBody = {
  type: 'object',
  properties: { feature_flag_key: { type: 'string', maxLength: 400 } },
} as const;
export type DuplicateBody = FromSchema<typeof duplicateBody>;

export const flagImplementationQuery = {
  type: 'object',
  properties: { events: { type: 'string', maxLength: 10_000 } },
} as const;
export type FlagImplementationQuery = FromSchema<typeof flagImplementationQuery>;

export const timeseriesQuery = {
  type: 'object',
  properties: { metric_uuid: { type: 'string', maxLength: 200 }, fingerprint: { type: 'string', maxLength: 64 } },
} as const;
export type TimeseriesQuery = FromSchema<typeof timeseriesQuery>;

export const holdoutBody = {
  type: 'object',
  properties: {
    name: { type: 'string', minLength: 1, maxLength: 400 },
    description: { type: ['string', 'null'], maxLength: 400 },
    filters: { type: 'array', maxItems: 20, items: {} },
  },
} as const;
export type HoldoutBody = FromSchema<typeof holdoutBody>;

export const savedMetricBody = {
  type: 'object',
  properties: {
    name: { type: 'string', minLength: 1, maxLength: 400 },
    description: { type: ['string', 'null'], maxLength: 400 },
    query: { type: 'object', additionalProperties: true },
    tags: { type: 'array', items: { type: 'string', maxLength: 255 }, maxItems: 50 },
  },
} as const;
export type SavedMetricBody = FromSchema<typeof savedMetricBody>;
