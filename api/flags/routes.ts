// The endpoints SDKs call to evaluate flags: /flags (v=1, v=2), the older /decide (v=3, v=4), and
// the flag definitions posthog-node polls for local evaluation.
import { createHash } from 'node:crypto';
import { readRawBody } from '../http/body.ts';
import { validationError } from '../http/errors.ts';
import { decodeSdkPayload, plainSmallJson } from '../capture/decode.ts';
import { sdkPreflight } from '../capture/routes.ts';
import { invalidProjectToken, projectByApiToken } from '../http/project-token.ts';
import { resolveProject } from '../http/auth.ts';
import { type ApiContext, defineRoute } from '../http/routes.ts';
import { evaluateFlagsForPerson } from '../../shared/flags/index.ts';
import { activeFlags } from '../../shared/flags/index.ts';
import { projectFlags } from './cache.ts';
import { flagsResponseSchema, localEvaluationSchema } from './schemas.ts';

const MAX_FLAGS_BODY = 1024 * 1024;

async function flagsHandler(ctx: ApiContext, defaultVersion: number) {
  const query = ctx.query as Record<string, string | undefined>;
  const raw = ctx.method === 'POST' ? await readRawBody(ctx, MAX_FLAGS_BODY) : Buffer.alloc(0);
  const payload: unknown =
    raw.length || query.data
      ? (plainSmallJson(ctx, raw, MAX_FLAGS_BODY) ?? (await decodeSdkPayload(ctx, raw, MAX_FLAGS_BODY, false)))
      : {};
  if (!payload || typeof payload !== 'object' || Array.isArray(payload))
    throw validationError('Request body must be a JSON object.');
  const body = payload as Record<string, unknown>;
  const token = body.token ?? body.api_key ?? query.token ?? query.api_key;
  const em = () => ctx.state.em; // forked only if read: a cached project and no person needed read none
  const project = await projectFlags(em, ctx.deps.flagCache, token);
  const distinctId = body.distinct_id ?? query.distinct_id;
  if (typeof distinctId !== 'string' && typeof distinctId !== 'number')
    throw validationError('Decide requires a distinct_id.', 'distinct_id', 'required');
  const personProperties =
    body.person_properties && typeof body.person_properties === 'object' && !Array.isArray(body.person_properties)
      ? (body.person_properties as Record<string, unknown>)
      : {};
  const onlyKeys = Array.isArray(body.flag_keys_to_evaluate)
    ? (body.flag_keys_to_evaluate as unknown[]).filter((k): k is string => typeof k === 'string')
    : undefined;
  const evaluations = await evaluateFlagsForPerson(em, project.projectId, project.flags, {
    distinctId: String(distinctId),
    personProperties,
    anonDistinctId: typeof body.$anon_distinct_id === 'string' ? body.$anon_distinct_id : undefined,
    onlyKeys,
  });
  const version = Number(query.v ?? defaultVersion);
  const payloadString = (payload: unknown) =>
    payload === null || payload === undefined
      ? undefined
      : typeof payload === 'string'
        ? payload
        : JSON.stringify(payload);
  const response: Record<string, unknown> =
    version >= 2 && version !== 3
      ? {
          flags: Object.fromEntries(
            evaluations.map((e) => [
              e.key,
              {
                key: e.key,
                enabled: e.enabled,
                variant: e.variant ?? null,
                reason: e.reason,
                metadata: { id: e.id, version: e.version, payload: payloadString(e.payload), description: null },
              },
            ]),
          ),
          errorsWhileComputingFlags: false,
          requestId: ctx.state.requestId,
        }
      : {
          featureFlags: Object.fromEntries(evaluations.map((e) => [e.key, e.variant ?? e.enabled])),
          featureFlagPayloads: Object.fromEntries(
            evaluations.filter((e) => e.enabled && e.payload != null).map((e) => [e.key, payloadString(e.payload)]),
          ),
          errorsWhileComputingFlags: false,
        };
  if (query.config === 'true' || defaultVersion === 3) {
    Object.assign(response, {
      config: { enable_collect_everything: true },
      supportedCompression: ['gzip', 'gzip-js'],
      sessionRecording: false,
      surveys: false,
      heatmaps: false,
      siteApps: [],
      toolbarParams: {},
      isAuthenticated: false,
      capturePerformance: false,
      autocapture_opt_out: false,
      autocaptureExceptions: false,
      elementsChainAsString: true,
    });
  }
  ctx.body = response;
}

const sdkRoute = (method: 'GET' | 'POST', path: string, defaultVersion: number, summary: string) =>
  defineRoute({
    method,
    path,
    summary,
    tags: ['flags'],
    scopes: null,
    rawBody: true,
    responses: {
      200: { description: 'Flag values for the person', schema: flagsResponseSchema },
      400: { description: 'A payload that does not decode to a JSON object, or no distinct_id' },
      401: {
        description: 'No project API token (token or api_key), or one of no project',
        example: invalidProjectToken().body,
      },
      503: { description: "The process's decoding budget is in use: try again after Retry-After" },
    },
    handler: (ctx) => flagsHandler(ctx, defaultVersion),
  });

const localEvaluationResponses = {
  200: { description: 'Active flags of the project (ETag; If-None-Match answers 304)', schema: localEvaluationSchema },
  304: { description: 'Not modified since the ETag given' },
};

const localEvaluationQuery = {
  type: 'object',
  properties: { token: { type: 'string' }, send_cohorts: { type: 'string' } },
  required: ['token'],
} as const;

const localEvaluation = defineRoute({
  method: 'GET',
  path: '/flags/definitions',
  summary: 'Flag definitions for local evaluation in server SDKs (personal API key + project token)',
  tags: ['flags'],
  scopes: ['feature_flag:read'],
  query: localEvaluationQuery,
  responses: localEvaluationResponses,
  handler: async (ctx) => {
    const project = await projectByApiToken(ctx.state.em, ctx.state.query.token);
    await resolveProject(ctx.state.em, ctx.state.auth, String(project.id)); // the key must reach that project
    const flags = await activeFlags(ctx.state.em, project.id);
    const body = {
      flags: flags.map((f) => ({
        id: f.id,
        team_id: project.id,
        name: f.name,
        key: f.key,
        filters: f.filters,
        deleted: f.deleted,
        active: f.active,
        // A sticky flag (an adaptive experiment's) is evaluated by /flags only: SDKs do not evaluate
        // continuity flags locally, so they ask the server, which serves each person's first variant.
        ensure_experience_continuity: f.ensure_experience_continuity || f.sticky,
        version: f.version,
        evaluation_runtime: f.evaluation_runtime ?? 'all',
      })),
      group_type_mapping: {},
      cohorts: {},
    };
    const etag = `"${createHash('sha1').update(JSON.stringify(body)).digest('hex')}"`;
    ctx.set('ETag', etag);
    if (ctx.get('if-none-match') === etag) {
      ctx.status = 304;
      return;
    }
    ctx.body = body;
  },
});

export const flagRoutes = [
  sdkPreflight('/flags'),
  sdkPreflight('/decide'),
  sdkRoute('POST', '/flags', 1, 'Evaluate every active flag for a person (SDKs; v=2 gives details)'),
  sdkRoute('GET', '/flags', 1, 'Evaluate flags (query-string form)'),
  sdkRoute('POST', '/decide', 3, 'Older flag evaluation endpoint (v=3 values, v=4 details)'),
  localEvaluation,
  {
    ...localEvaluation,
    path: '/api/feature_flag/local_evaluation',
    summary: 'Flag definitions for local evaluation (older path)',
  },
];
