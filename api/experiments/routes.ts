import { ApiError, notFound, validationError } from '../http/errors.ts';
import { pageOf, paginated, paginatedSchema } from '../http/pagination.ts';
import { actorOf, defineRoute, type ApiContext } from '../http/routes.ts';
import * as store from '../../shared/experiments/store.ts';
import { withTimeout } from '../../shared/timeout.ts';
import { isoTimestamp } from '../../shared/time.ts';
import {
  anyJson,
  dateTime,
  integerIdParam,
  nullableDateTime,
  nullableInteger,
  nullableString,
  record,
} from '../http/schemas.ts';
import { experimentSchema, serializeExperiment } from './serializers.ts';
import {
  createBody,
  type DuplicateBody,
  duplicateBody,
  type FlagImplementationQuery,
  flagImplementationQuery,
  type ListQuery,
  listQuery,
  type TimeseriesQuery,
  timeseriesQuery,
  type UpdateBody,
  replaceBody,
  updateBody,
} from './schemas.ts';
import { createExperiment, resetGuardrails, updateExperiment } from './service.ts';
import { enqueue } from '../../shared/jobs.ts';

const P = '/api/projects/:project_id/experiments';
const ID = integerIdParam('experiment');

async function findExperiment(ctx: ApiContext, id = ctx.state.params.id): Promise<any> {
  if (!/^\d{1,9}$/.test(id)) throw notFound();
  const row = await store.findExperiment(ctx.state.em, ctx.state.project.id, id);
  if (!row) throw notFound();
  return row;
}

const STATUSES = new Set(['draft', 'running', 'complete']);

async function list(ctx: ApiContext<ListQuery>) {
  const q = ctx.state.query;
  const status = String(q.status ?? '').toLowerCase();
  const filter: store.ExperimentFilter = {
    archived: String(q.archived).toLowerCase() === 'true',
    status: STATUSES.has(status) ? (status as store.ExperimentFilter['status']) : undefined,
    search: q.search ? String(q.search) : undefined,
    createdById: q.created_by_id,
  };
  if (q.order && !store.isExperimentOrder(q.order)) throw validationError(`Invalid order field: '${q.order}'`, 'order');
  const page = pageOf(q);
  const { count, rows } = await store.listExperiments(ctx.state.em, ctx.state.project.id, filter, q.order, page);
  ctx.body = paginated(ctx, page, count, rows.map(serializeExperiment));
}

async function duplicate(ctx: ApiContext<Record<string, unknown>, DuplicateBody>) {
  const source = await findExperiment(ctx);
  const body = ctx.state.body ?? {};
  if (
    body.feature_flag_key !== undefined &&
    (typeof body.feature_flag_key !== 'string' || body.feature_flag_key === '')
  )
    throw validationError('Not a valid string.', 'feature_flag_key');
  const names = await store.experimentNamesStartingWith(ctx.state.em, ctx.state.project.id, `${source.name} (Copy)`);
  let name = `${source.name} (Copy)`;
  for (let n = 1; names.has(name); n++) name = `${source.name} (Copy) ${n}`;
  const id = await createExperiment(ctx.state.em, actorOf(ctx), {
    name,
    description: source.description,
    type: source.type,
    parameters: source.parameters,
    filters: source.filters,
    secondary_metrics: source.secondary_metrics,
    metrics: source.metrics,
    metrics_secondary: source.metrics_secondary,
    stats_config: source.stats_config,
    exposure_criteria: source.exposure_criteria,
    primary_metrics_ordered_uuids: source.primary_metrics_ordered_uuids,
    secondary_metrics_ordered_uuids: source.secondary_metrics_ordered_uuids,
    feature_flag_key: body.feature_flag_key ?? source.feature_flag.key,
    saved_metrics_ids: source.saved_metrics.map((l: any) => ({ id: l.saved_metric, metadata: l.metadata })),
  });
  ctx.body = serializeExperiment(await findExperiment(ctx, String(id)));
}

/** PATCH and PUT (PUT's body must also carry the required fields; the same rules apply). */
async function update(ctx: ApiContext<Record<string, unknown>, UpdateBody>) {
  const current = await findExperiment(ctx);
  await updateExperiment(ctx.state.em, actorOf(ctx), current, ctx.state.body);
  ctx.body = serializeExperiment(await store.findExperiment(ctx.state.em, ctx.state.project.id, current.id, true));
}

async function exposureCohort(ctx: ApiContext) {
  const experiment = await findExperiment(ctx);
  if (!experiment.feature_flag) throw validationError('Experiment does not have a feature flag');
  if (!experiment.start_date) throw validationError('Experiment does not have a start date');
  if (experiment.exposure_cohort_id) throw validationError('Experiment already has an exposure cohort');
  const variants = (experiment.feature_flag.filters?.multivariate?.variants ?? []).map((v: any) => v.key);
  const filters = {
    properties: {
      type: 'OR',
      values: [
        {
          type: 'OR',
          values: [
            {
              type: 'behavioral',
              value: 'performed_event',
              key: '$feature_flag_called',
              negation: false,
              event_type: 'events',
              explicit_datetime: new Date(experiment.start_date).toISOString().replace('Z', '+00:00'),
              event_filters: [
                { key: '$feature_flag', value: [experiment.feature_flag.key], operator: 'exact', type: 'event' },
                ...(variants.length
                  ? [{ key: '$feature_flag_response', value: variants, operator: 'exact', type: 'event' }]
                  : []),
              ],
            },
          ],
        },
      ],
    },
  };
  const cohort = await ctx.state.em
    .fork()
    .transactional((tx) =>
      store.createExposureCohort(
        tx,
        ctx.state.project.id,
        experiment.id,
        `Users exposed to experiment "${experiment.name}"`,
        filters,
        ctx.state.auth.userId,
      ),
    );
  ctx.body = {
    cohort: {
      id: cohort.id,
      name: cohort.name,
      description: cohort.description,
      filters: cohort.filters,
      query: null,
      is_static: false,
      is_calculating: cohort.is_calculating,
      deleted: false,
      count: cohort.count,
      created_at: isoTimestamp(cohort.created_at),
      experiment_set: [experiment.id],
    },
  };
}

/** PostHog: false once recent events of these kinds carry `$feature/…` properties (the SDK sends flag values). */
async function requiresFlagImplementation(ctx: ApiContext<FlagImplementationQuery>) {
  let events: string[] = [];
  if (ctx.state.query.events) {
    try {
      const parsed = JSON.parse(ctx.state.query.events);
      if (!Array.isArray(parsed)) throw new Error();
      events = parsed.map((e: any) => e?.id).filter((id: unknown): id is string => typeof id === 'string');
    } catch {
      throw validationError('events must be a JSON array of {"id": "<event name>"} objects.', 'events');
    }
  }
  if (events.length === 0) {
    ctx.body = { result: true };
    return;
  }
  ctx.body = { result: !(await ctx.deps.events.recentEventsCarryFlagValues(ctx.state.project.id, events)) };
}

async function timeseries(ctx: ApiContext<TimeseriesQuery>) {
  const experiment = await findExperiment(ctx);
  const { metric_uuid, fingerprint } = ctx.state.query;
  if (!metric_uuid) throw validationError('metric_uuid query parameter is required');
  if (!fingerprint) throw validationError('fingerprint query parameter is required');
  if (!experiment.start_date) throw validationError('Experiment has not been started yet');
  const rows = await store.metricResults(ctx.state.em, experiment.id, metric_uuid, fingerprint);
  const tz = ctx.state.project.timezone;
  const days = await store.daysBetween(ctx.state.em, experiment.start_date, experiment.end_date, tz);
  const series: Record<string, unknown> = Object.fromEntries((days as string[]).map((d) => [d, null]));
  const errors: Record<string, string> = {};
  let completed = 0;
  for (const row of rows) {
    if (row.status === 'completed') {
      series[row.day] = row.result;
      completed++;
    } else if (row.status === 'failed') errors[row.day] = row.error_message;
  }
  const failed = Object.keys(errors).length;
  const status =
    rows.length === 0
      ? 'pending'
      : completed === 0 && failed > 0
        ? 'failed'
        : completed === days.length
          ? 'completed'
          : completed > 0
            ? 'partial'
            : 'pending';
  const computed = rows
    .filter((r) => r.status === 'completed')
    .map((r) => r.computed_at)
    .sort();
  ctx.body = {
    experiment_id: experiment.id,
    metric_uuid,
    status,
    timeseries: series,
    errors: failed ? errors : null,
    computed_at: isoTimestamp(computed.at(-1) ?? null),
    created_at: isoTimestamp(rows[0]?.created_at ?? experiment.created_at),
    updated_at: isoTimestamp(rows.at(-1)?.updated_at ?? experiment.updated_at),
  };
}

/** Reverses a guardrail circuit-breaker trip (restores the flag, turns the breaker off). */
async function guardrailsReset(ctx: ApiContext) {
  const experiment = await findExperiment(ctx);
  await resetGuardrails(ctx.state.em, actorOf(ctx), experiment.id);
  ctx.body = serializeExperiment(await findExperiment(ctx));
}

/** Queues the results job for one experiment now (at most one pending per experiment). */
async function recalculate(ctx: ApiContext) {
  const experiment = await findExperiment(ctx);
  if (!experiment.start_date) throw validationError('Experiment has not been started yet');
  const job = await withTimeout(
    enqueue(
      ctx.deps.queues,
      'experimentResults',
      { experimentId: experiment.id },
      { deduplication: { id: `experiment-${experiment.id}` } },
    ),
    1000,
    'Redis',
  ).catch(() => null);
  if (!job)
    throw new ApiError(
      503,
      'server_error',
      'queue_unavailable',
      'The job queue is unavailable; the daily run will compute these results. Try again later.',
    );
  ctx.status = 202;
  ctx.body = { status: 'queued', job_id: job.id, experiment_id: experiment.id };
}

const exposureCohortSchema = record({
  id: { type: 'integer' },
  name: nullableString,
  description: { type: 'string' },
  filters: anyJson(),
  query: { type: 'null' },
  is_static: { type: 'boolean' },
  is_calculating: { type: 'boolean' },
  deleted: { type: 'boolean' },
  count: nullableInteger,
  created_at: dateTime,
  experiment_set: { type: 'array', items: { type: 'integer' } },
});

const timeseriesSchema = record({
  experiment_id: { type: 'integer' },
  metric_uuid: { type: 'string' },
  status: { enum: ['pending', 'partial', 'completed', 'failed'] },
  timeseries: {
    type: 'object',
    description: 'One entry per day (YYYY-MM-DD) since the start: the computed result, or null',
    additionalProperties: anyJson(),
  },
  errors: {
    type: ['object', 'null'],
    description: 'Error message per failed day',
    additionalProperties: { type: 'string' },
  },
  computed_at: nullableDateTime,
  created_at: dateTime,
  updated_at: dateTime,
});

export const experimentRoutes = [
  defineRoute({
    method: 'GET',
    path: P,
    summary: 'List experiments (deleted hidden; archived only with archived=true)',
    tags: ['experiments'],
    scopes: ['experiment:read'],
    query: listQuery,
    responses: { 200: { description: 'A page of experiments', schema: paginatedSchema(experimentSchema) } },
    handler: list,
  }),
  defineRoute({
    method: 'POST',
    path: P,
    summary: 'Create an experiment (and its feature flag unless one with the key exists)',
    tags: ['experiments'],
    scopes: ['experiment:write'],
    body: createBody,
    responses: { 201: { description: 'The experiment', schema: experimentSchema } },
    handler: async (ctx) => {
      const id = await createExperiment(ctx.state.em, actorOf(ctx), ctx.state.body);
      ctx.status = 201;
      ctx.body = serializeExperiment(await findExperiment(ctx, String(id)));
    },
  }),
  defineRoute({
    method: 'GET',
    path: `${P}/requires_flag_implementation`,
    summary: 'Whether events still lack $feature/… properties (the flag is not yet implemented in code)',
    tags: ['experiments'],
    scopes: ['experiment:read'],
    query: flagImplementationQuery,
    responses: { 200: { description: 'Result', schema: record({ result: { type: 'boolean' } }) } },
    handler: requiresFlagImplementation,
  }),
  defineRoute({
    method: 'GET',
    path: `${P}/:id`,
    params: ID,
    summary: 'Retrieve an experiment',
    tags: ['experiments'],
    scopes: ['experiment:read'],
    responses: {
      200: { description: 'The experiment', schema: experimentSchema },
      404: { description: 'Not found (or soft-deleted)' },
    },
    handler: async (ctx) => {
      ctx.body = serializeExperiment(await findExperiment(ctx));
    },
  }),
  defineRoute({
    method: 'PATCH',
    path: `${P}/:id`,
    params: ID,
    summary: 'Update an experiment; {"deleted": true} soft-deletes it',
    tags: ['experiments'],
    scopes: ['experiment:write'],
    body: updateBody,
    responses: { 200: { description: 'The experiment', schema: experimentSchema } },
    handler: update,
  }),
  defineRoute({
    method: 'PUT',
    path: `${P}/:id`,
    params: ID,
    summary:
      'Update an experiment (full update: name and feature_flag_key are required, the key unchanged; other fields as PATCH)',
    tags: ['experiments'],
    scopes: ['experiment:write'],
    body: replaceBody,
    responses: { 200: { description: 'The experiment', schema: experimentSchema } },
    handler: update,
  }),
  defineRoute({
    method: 'DELETE',
    path: `${P}/:id`,
    params: ID,
    summary: 'Not allowed: hard delete is forbidden; PATCH {"deleted": true} instead (405, no body)',
    tags: ['experiments'],
    scopes: ['experiment:write'],
    responses: { 405: { description: 'Always; no body', noBody: true } },
    handler: (ctx) => {
      // Body first: Koa turns an explicit null body into 204 unless the status is set afterwards.
      ctx.body = null;
      ctx.status = 405;
    },
  }),
  defineRoute({
    method: 'POST',
    path: `${P}/:id/duplicate`,
    params: ID,
    summary: 'Duplicate an experiment as a draft named "<name> (Copy)"',
    tags: ['experiments'],
    scopes: ['experiment:write'],
    body: duplicateBody,
    responses: { 200: { description: 'The new experiment', schema: experimentSchema } },
    handler: duplicate,
  }),
  defineRoute({
    method: 'POST',
    path: `${P}/:id/create_exposure_cohort_for_experiment`,
    params: ID,
    summary: 'Create a dynamic cohort of persons exposed to the experiment',
    tags: ['experiments'],
    scopes: ['experiment:write'],
    responses: { 200: { description: 'The cohort', schema: record({ cohort: exposureCohortSchema }) } },
    handler: exposureCohort,
  }),
  defineRoute({
    method: 'POST',
    path: `${P}/:id/recalculate_timeseries`,
    params: ID,
    summary: 'Compute the results of every metric now (otherwise daily at 02:00 UTC)',
    tags: ['experiments'],
    scopes: ['experiment:write'],
    responses: {
      202: {
        description: 'Queued',
        schema: record({ status: { const: 'queued' }, job_id: { type: 'string' }, experiment_id: { type: 'integer' } }),
      },
    },
    handler: recalculate,
  }),
  defineRoute({
    method: 'POST',
    path: `${P}/:id/guardrails/reset`,
    params: ID,
    summary:
      "Reverse a guardrail circuit-breaker trip: the flag's filters as before the trip, stats_config.circuit_breaker off",
    tags: ['experiments'],
    scopes: ['experiment:write'],
    responses: { 200: { description: 'The experiment', schema: experimentSchema } },
    handler: guardrailsReset,
  }),
  defineRoute({
    method: 'GET',
    path: `${P}/:id/timeseries_results`,
    params: ID,
    summary: 'Daily results of one metric, as computed by the worker',
    tags: ['experiments'],
    scopes: ['experiment:read'],
    query: timeseriesQuery,
    responses: { 200: { description: 'Timeseries', schema: timeseriesSchema } },
    handler: timeseries,
  }),
];
