import { ApiError, notFound, validationError } from '../http/errors.ts';
import { isId } from '../../shared/platform/ids.ts';
import { pageOf, paginated, paginatedSchema } from '../http/pagination.ts';
import { actorOf, defineRoute, type ApiContext } from '../http/routes.ts';
import * as store from '../../shared/experiments/index.ts';
import { withTimeout } from '../../shared/platform/timeout.ts';
import { isoTimestamp } from '../../shared/platform/time.ts';
import {
  anyJson,
  dateTime,
  integerIdParam,
  nullableDateTime,
  nullableInteger,
  nullableOpenObject,
  nullableString,
  record,
} from '../http/schemas.ts';
import { applyingRules } from './errors.ts';
import { experimentSchema, serializeExperiment } from './serializers.ts';
import {
  createBody,
  duplicateBody,
  flagImplementationQuery,
  listQuery,
  replaceBody,
  timeseriesQuery,
  updateBody,
} from './schemas.ts';
import {
  banditSummary,
  createExperiment,
  duplicateExperiment,
  exposureCohortFor,
  metricTimeseries,
  resetGuardrails,
  updateExperiment,
} from '../../shared/experiments/index.ts';
import { enqueue } from '../../shared/platform/jobs.ts';

const P = '/api/projects/:project_id/experiments';
const ID = integerIdParam('experiment');

async function findExperiment(ctx: ApiContext, id: string = ctx.state.params.id): Promise<store.ExperimentRow> {
  if (!isId(id)) throw notFound();
  const row = await store.findExperiment(ctx.state.em, ctx.state.project.id, id);
  if (!row) throw notFound();
  return row;
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
  bandit: nullableOpenObject(
    "Adaptive allocation (parameters.allocation), for the experiment's primary metric: the settings, the last run's status, weights (rollout percentages), probabilities of being best, exposures, periods, period-weighted estimates of each variant's difference from control with 95% intervals (estimate_method batched_ols), and the history of reallocations — null otherwise",
  ),
});

const STATUSES = new Set(['draft', 'running', 'complete']);
const TAGS = ['experiments'];

const list = defineRoute({
  method: 'GET',
  path: P,
  summary: 'List experiments (deleted hidden; archived only with archived=true)',
  tags: TAGS,
  scopes: ['experiment:read'],
  query: listQuery,
  responses: { 200: { description: 'A page of experiments', schema: paginatedSchema(experimentSchema) } },
  handler: async (ctx) => {
    const q = ctx.state.query;
    const status = String(q.status ?? '').toLowerCase();
    const filter: store.ExperimentFilter = {
      archived: String(q.archived).toLowerCase() === 'true',
      status: STATUSES.has(status) ? (status as store.ExperimentFilter['status']) : undefined,
      search: q.search ? String(q.search) : undefined,
      createdById: q.created_by_id,
    };
    if (q.order && !store.isExperimentOrder(q.order))
      throw validationError(`Invalid order field: '${q.order}'`, 'order');
    const page = pageOf(q);
    const { count, rows } = await store.listExperiments(ctx.state.em, ctx.state.project.id, filter, q.order, page);
    ctx.body = paginated(ctx, page, count, rows.map(serializeExperiment));
  },
});

const create = defineRoute({
  method: 'POST',
  path: P,
  summary: 'Create an experiment (and its feature flag unless one with the key exists)',
  tags: TAGS,
  scopes: ['experiment:write'],
  body: createBody,
  responses: { 201: { description: 'The experiment', schema: experimentSchema } },
  handler: async (ctx) => {
    const id = await applyingRules(() => createExperiment(ctx.state.em, actorOf(ctx), ctx.state.body));
    ctx.status = 201;
    ctx.body = serializeExperiment(await findExperiment(ctx, String(id)));
  },
});

/** PostHog: false once recent events of these kinds carry `$feature/…` properties (the SDK sends flag values). */
const requiresFlagImplementation = defineRoute({
  method: 'GET',
  path: `${P}/requires_flag_implementation`,
  summary: 'Whether events still lack $feature/… properties (the flag is not yet implemented in code)',
  tags: TAGS,
  scopes: ['experiment:read'],
  query: flagImplementationQuery,
  responses: { 200: { description: 'Result', schema: record({ result: { type: 'boolean' } }) } },
  handler: async (ctx) => {
    let events: string[] = [];
    if (ctx.state.query.events) {
      try {
        const parsed: unknown = JSON.parse(ctx.state.query.events);
        if (!Array.isArray(parsed)) throw new Error();
        events = parsed
          .map((e: unknown) => (e as { id?: unknown } | null)?.id)
          .filter((id): id is string => typeof id === 'string');
      } catch {
        throw validationError('events must be a JSON array of {"id": "<event name>"} objects.', 'events');
      }
    }
    if (events.length === 0) {
      ctx.body = { result: true };
      return;
    }
    ctx.body = { result: !(await ctx.deps.events.recentEventsCarryFlagValues(ctx.state.project.id, events)) };
  },
});

const retrieve = defineRoute({
  method: 'GET',
  path: `${P}/:id`,
  params: ID,
  summary: 'Retrieve an experiment',
  tags: TAGS,
  scopes: ['experiment:read'],
  responses: {
    200: { description: 'The experiment', schema: experimentSchema },
    404: { description: 'Not found (or soft-deleted)' },
  },
  handler: async (ctx) => {
    ctx.body = serializeExperiment(await findExperiment(ctx));
  },
});

/** PATCH, and PUT below (PUT's body must also carry the required fields; the same rules apply). */
const update = defineRoute({
  method: 'PATCH',
  path: `${P}/:id`,
  params: ID,
  summary: 'Update an experiment; {"deleted": true} soft-deletes it',
  tags: TAGS,
  scopes: ['experiment:write'],
  body: updateBody,
  responses: { 200: { description: 'The experiment', schema: experimentSchema } },
  handler: async (ctx) => {
    const current = await findExperiment(ctx);
    await applyingRules(() => updateExperiment(ctx.state.em, actorOf(ctx), current, ctx.state.body));
    const updated = await store.findExperiment(ctx.state.em, ctx.state.project.id, current.id, true);
    if (!updated) throw notFound();
    ctx.body = serializeExperiment(updated);
  },
});

const replace = {
  ...update,
  method: 'PUT',
  summary:
    'Update an experiment (full update: name and feature_flag_key are required, the key unchanged; other fields as PATCH)',
  body: replaceBody,
} as const;

const remove = defineRoute({
  method: 'DELETE',
  path: `${P}/:id`,
  params: ID,
  summary: 'Not allowed: hard delete is forbidden; PATCH {"deleted": true} instead (405, no body)',
  tags: TAGS,
  scopes: ['experiment:write'],
  responses: { 405: { description: 'Always; no body', noBody: true } },
  handler: (ctx) => {
    // Body first: Koa turns an explicit null body into 204 unless the status is set afterwards.
    ctx.body = null;
    ctx.status = 405;
  },
});

const duplicate = defineRoute({
  method: 'POST',
  path: `${P}/:id/duplicate`,
  params: ID,
  summary: 'Duplicate an experiment as a draft named "<name> (Copy)"',
  tags: TAGS,
  scopes: ['experiment:write'],
  body: duplicateBody,
  responses: { 200: { description: 'The new experiment', schema: experimentSchema } },
  handler: async (ctx) => {
    const source = await findExperiment(ctx);
    const body = ctx.state.body ?? {};
    if (
      body.feature_flag_key !== undefined &&
      (typeof body.feature_flag_key !== 'string' || body.feature_flag_key === '')
    )
      throw validationError('Not a valid string.', 'feature_flag_key');
    const id = await applyingRules(() =>
      duplicateExperiment(ctx.state.em, actorOf(ctx), source, body.feature_flag_key),
    );
    ctx.body = serializeExperiment(await findExperiment(ctx, String(id)));
  },
});

const exposureCohort = defineRoute({
  method: 'POST',
  path: `${P}/:id/create_exposure_cohort_for_experiment`,
  params: ID,
  summary: 'Create a dynamic cohort of persons exposed to the experiment',
  tags: TAGS,
  scopes: ['experiment:write'],
  responses: { 200: { description: 'The cohort', schema: record({ cohort: exposureCohortSchema }) } },
  handler: async (ctx) => {
    const experiment = await findExperiment(ctx);
    const cohort = await applyingRules(() => exposureCohortFor(ctx.state.em, actorOf(ctx), experiment));
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
  },
});

/** Queues the results job for one experiment now (at most one pending per experiment). */
const recalculate = defineRoute({
  method: 'POST',
  path: `${P}/:id/recalculate_timeseries`,
  params: ID,
  summary: 'Compute the results of every metric now (otherwise daily at 02:00 UTC)',
  tags: TAGS,
  scopes: ['experiment:write'],
  responses: {
    202: {
      description: 'Queued',
      schema: record({ status: { const: 'queued' }, job_id: { type: 'string' }, experiment_id: { type: 'integer' } }),
    },
  },
  handler: async (ctx) => {
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
  },
});

/** Reverses a guardrail circuit-breaker trip (restores the flag, turns the breaker off). */
const guardrailsReset = defineRoute({
  method: 'POST',
  path: `${P}/:id/guardrails/reset`,
  params: ID,
  summary:
    "Reverse a guardrail circuit-breaker trip: the flag's filters as before the trip, stats_config.circuit_breaker off",
  tags: TAGS,
  scopes: ['experiment:write'],
  responses: { 200: { description: 'The experiment', schema: experimentSchema } },
  handler: async (ctx) => {
    const experiment = await findExperiment(ctx);
    await applyingRules(() => resetGuardrails(ctx.state.em, actorOf(ctx), experiment.id));
    ctx.body = serializeExperiment(await findExperiment(ctx));
  },
});

const timeseries = defineRoute({
  method: 'GET',
  path: `${P}/:id/timeseries_results`,
  params: ID,
  summary: 'Daily results of one metric, as computed by the worker',
  tags: TAGS,
  scopes: ['experiment:read'],
  query: timeseriesQuery,
  responses: { 200: { description: 'Timeseries', schema: timeseriesSchema } },
  handler: async (ctx) => {
    const experiment = await findExperiment(ctx);
    const { metric_uuid, fingerprint } = ctx.state.query;
    const series = await applyingRules(() =>
      metricTimeseries(ctx.state.em, experiment, metric_uuid, fingerprint, ctx.state.project.timezone),
    );
    const bandit = await banditSummary(ctx.state.em, experiment, metric_uuid);
    ctx.body = {
      ...series,
      bandit,
      computed_at: isoTimestamp(series.computed_at),
      created_at: isoTimestamp(series.created_at),
      updated_at: isoTimestamp(series.updated_at),
    };
  },
});

export const experimentRoutes = [
  list,
  create,
  requiresFlagImplementation,
  retrieve,
  update,
  replace,
  remove,
  duplicate,
  exposureCohort,
  recalculate,
  guardrailsReset,
  timeseries,
];
