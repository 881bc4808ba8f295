// Experiment saved metrics: reusable metric queries that experiments link by saved_metrics_ids.
import * as store from '../../shared/experiments/holdout-and-metric-store.ts';
import { notFound, validationError } from '../http/errors.ts';
import { PAGE_QUERY_PROPERTIES, pageOf, paginated, paginatedSchema } from '../http/pagination.ts';
import { type ApiContext, defineRoute } from '../http/routes.ts';
import { integerIdParam, openObject, record, stringArray } from '../http/schemas.ts';
import { type SavedMetricBody, savedMetricBody } from './schemas.ts';
import { sideRowBase, sideRowBaseSchema } from './serializers.ts';

const P = '/api/projects/:project_id/experiment_saved_metrics';
const ID = integerIdParam('saved metric');
const TAGS = ['experiment saved metrics'];
const METRIC_KINDS = ['ExperimentMetric', 'ExperimentTrendsQuery', 'ExperimentFunnelsQuery'];

const savedMetricSchema = record({
  ...sideRowBaseSchema,
  query: openObject('The metric query (kind, metric_type …)'),
  tags: stringArray,
});

const serialize = (row: store.SavedMetricRow) => ({ ...sideRowBase(row), query: row.query, tags: row.tags ?? [] });

/** The fields a create (or, `partial`, an update) body sets. */
function fieldsOf(body: SavedMetricBody, partial: boolean): store.SavedMetricFields {
  if (!partial && !body.name) throw validationError('This field is required.', 'name', 'required');
  const out: store.SavedMetricFields = {};
  if (body.name !== undefined) out.name = body.name;
  if (body.description !== undefined) out.description = body.description;
  if (body.tags !== undefined) out.tags = [...new Set<string>(body.tags)];
  if (body.query === undefined && partial) return out;
  const query = body.query;
  if (!query || Object.keys(query).length === 0)
    throw validationError('Query is required to create a saved metric', 'query');
  if (typeof query.kind !== 'string' || !METRIC_KINDS.includes(query.kind))
    throw validationError(
      "Metric query kind must be 'ExperimentMetric', 'ExperimentTrendsQuery' or 'ExperimentFunnelsQuery'",
      'query',
    );
  if (query.kind === 'ExperimentMetric' && !query.metric_type)
    throw validationError('ExperimentMetric requires a metric_type', 'query');
  if (
    query.kind === 'ExperimentMetric' &&
    (typeof query.metric_type !== 'string' || !['mean', 'funnel', 'ratio'].includes(query.metric_type))
  )
    throw validationError("ExperimentMetric metric_type must be 'mean', 'funnel', or 'ratio'", 'query');
  out.query = query;
  return out;
}

async function find(ctx: ApiContext, id: string | number = ctx.state.params.id) {
  const row =
    /^\d{1,9}$/.test(String(id)) && (await store.findSavedMetric(ctx.state.em, ctx.state.project.id, Number(id)));
  if (!row) throw notFound();
  return row;
}

const listSavedMetrics = defineRoute({
  method: 'GET',
  path: P,
  summary: 'List experiment saved metrics',
  tags: TAGS,
  scopes: ['experiment:read'],
  query: { type: 'object', properties: PAGE_QUERY_PROPERTIES },
  responses: { 200: { description: 'A page', schema: paginatedSchema(savedMetricSchema) } },
  handler: async (ctx) => {
    const page = pageOf(ctx.state.query);
    const { count, rows } = await store.listSavedMetrics(ctx.state.em, ctx.state.project.id, page);
    ctx.body = paginated(ctx, page, count, rows.map(serialize));
  },
});

const createSavedMetric = defineRoute({
  method: 'POST',
  path: P,
  summary: 'Create an experiment saved metric',
  tags: TAGS,
  scopes: ['experiment:write'],
  body: savedMetricBody,
  responses: { 201: { description: 'Created', schema: savedMetricSchema } },
  handler: async (ctx) => {
    const fields = fieldsOf(ctx.state.body ?? {}, false);
    const id = await store.insertSavedMetric(ctx.state.em, ctx.state.project.id, ctx.state.auth.userId, {
      ...fields,
      name: fields.name ?? '',
      query: fields.query ?? {},
    });
    ctx.status = 201;
    ctx.body = serialize(await find(ctx, id));
  },
});

const getSavedMetric = defineRoute({
  method: 'GET',
  path: `${P}/:id`,
  params: ID,
  summary: 'Retrieve an experiment saved metric',
  tags: TAGS,
  scopes: ['experiment:read'],
  responses: { 200: { description: 'Found', schema: savedMetricSchema } },
  handler: async (ctx) => {
    ctx.body = serialize(await find(ctx));
  },
});

const updateSavedMetric = defineRoute({
  method: 'PATCH',
  path: `${P}/:id`,
  params: ID,
  summary: 'Update an experiment saved metric',
  tags: TAGS,
  scopes: ['experiment:write'],
  body: savedMetricBody,
  responses: { 200: { description: 'Updated', schema: savedMetricSchema } },
  handler: async (ctx) => {
    const existing = await find(ctx);
    await store.updateSavedMetric(ctx.state.em, existing.id, fieldsOf(ctx.state.body ?? {}, true));
    ctx.body = serialize(await find(ctx));
  },
});

const deleteSavedMetric = defineRoute({
  method: 'DELETE',
  path: `${P}/:id`,
  params: ID,
  summary: 'Delete an experiment saved metric',
  tags: TAGS,
  scopes: ['experiment:write'],
  responses: { 204: { description: 'Deleted' } },
  handler: async (ctx) => {
    const existing = await find(ctx);
    await store.deleteSavedMetric(ctx.state.em, existing.id);
    ctx.status = 204;
  },
});

export const savedMetricRoutes = [
  listSavedMetrics,
  createSavedMetric,
  getSavedMetric,
  updateSavedMetric,
  deleteSavedMetric,
];
