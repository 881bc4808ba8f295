// Experiment saved metrics: reusable metric queries that experiments link by saved_metrics_ids.
import * as store from '../../shared/experiments/holdout-and-metric-store.ts';
import { notFound, validationError } from '../http/errors.ts';
import { PAGE_QUERY_PROPERTIES, pageOf, paginated, paginatedSchema } from '../http/pagination.ts';
import { defineRoute, type ApiContext } from '../http/routes.ts';
import { integerIdParam, openObject, record, stringArray } from '../http/schemas.ts';
import { type SavedMetricBody, savedMetricBody } from './schemas.ts';
import { sideRowBase, sideRowBaseSchema } from './serializers.ts';

const P = '/api/projects/:project_id/experiment_saved_metrics';
const ID = integerIdParam('saved metric');
const TABLE = 'experiment_saved_metric';
const TAGS = ['experiment saved metrics'];
const METRIC_KINDS = ['ExperimentMetric', 'ExperimentTrendsQuery', 'ExperimentFunnelsQuery'];

const savedMetricSchema = record({
  ...sideRowBaseSchema,
  query: openObject('The metric query (kind, metric_type …)'),
  tags: stringArray,
});

const serialize = (row: Record<string, any>) => ({ ...sideRowBase(row), query: row.query, tags: row.tags ?? [] });

/** The columns a create (or, `partial`, an update) body sets. */
function columnsOf(body: Record<string, any>, partial: boolean): Record<string, unknown> {
  if (!partial && !body.name) throw validationError('This field is required.', 'name', 'required');
  const out: Record<string, unknown> = {};
  if (body.name !== undefined) out.name = body.name;
  if (body.description !== undefined) out.description = body.description;
  if (body.tags !== undefined) out.tags = [...new Set<string>(body.tags)];
  if (body.query === undefined && partial) return out;
  const query = body.query;
  if (!query || Object.keys(query).length === 0)
    throw validationError('Query is required to create a saved metric', 'query');
  if (!METRIC_KINDS.includes(query.kind))
    throw validationError(
      "Metric query kind must be 'ExperimentMetric', 'ExperimentTrendsQuery' or 'ExperimentFunnelsQuery'",
      'query',
    );
  if (query.kind === 'ExperimentMetric' && !query.metric_type)
    throw validationError('ExperimentMetric requires a metric_type', 'query');
  if (query.kind === 'ExperimentMetric' && !['mean', 'funnel', 'ratio'].includes(query.metric_type))
    throw validationError("ExperimentMetric metric_type must be 'mean', 'funnel', or 'ratio'", 'query');
  out.query = query;
  return out;
}

async function find(ctx: ApiContext, id: string | number = ctx.state.params.id) {
  const row = /^\d{1,9}$/.test(String(id)) && (await store.findSideRow(ctx.state.em, TABLE, ctx.state.project.id, id));
  if (!row) throw notFound();
  return row;
}

async function listSavedMetrics(ctx: ApiContext) {
  const page = pageOf(ctx.state.query);
  const { count, rows } = await store.listSideRows(ctx.state.em, TABLE, ctx.state.project.id, page);
  ctx.body = paginated(ctx, page, count, rows.map(serialize));
}

async function createSavedMetric(ctx: ApiContext<Record<string, unknown>, SavedMetricBody>) {
  const columns = columnsOf(ctx.state.body ?? {}, false);
  const id = await store.insertSideRow(ctx.state.em, TABLE, ctx.state.project.id, ctx.state.auth.userId, columns);
  ctx.status = 201;
  ctx.body = serialize(await find(ctx, id));
}

async function getSavedMetric(ctx: ApiContext) {
  ctx.body = serialize(await find(ctx));
}

async function updateSavedMetric(ctx: ApiContext<Record<string, unknown>, SavedMetricBody>) {
  const existing = await find(ctx);
  await store.updateSideRow(ctx.state.em, TABLE, existing.id, columnsOf(ctx.state.body ?? {}, true));
  ctx.body = serialize(await find(ctx));
}

async function deleteSavedMetric(ctx: ApiContext) {
  const existing = await find(ctx);
  await store.deleteSideRow(ctx.state.em, TABLE, existing.id);
  ctx.status = 204;
}

export const savedMetricRoutes = [
  defineRoute({
    method: 'GET',
    path: P,
    summary: 'List experiment saved metrics',
    tags: TAGS,
    scopes: ['experiment:read'],
    query: { type: 'object', properties: PAGE_QUERY_PROPERTIES },
    responses: { 200: { description: 'A page', schema: paginatedSchema(savedMetricSchema) } },
    handler: listSavedMetrics,
  }),
  defineRoute({
    method: 'POST',
    path: P,
    summary: 'Create an experiment saved metric',
    tags: TAGS,
    scopes: ['experiment:write'],
    body: savedMetricBody,
    responses: { 201: { description: 'Created', schema: savedMetricSchema } },
    handler: createSavedMetric,
  }),
  defineRoute({
    method: 'GET',
    path: `${P}/:id`,
    params: ID,
    summary: 'Retrieve an experiment saved metric',
    tags: TAGS,
    scopes: ['experiment:read'],
    responses: { 200: { description: 'Found', schema: savedMetricSchema } },
    handler: getSavedMetric,
  }),
  defineRoute({
    method: 'PATCH',
    path: `${P}/:id`,
    params: ID,
    summary: 'Update an experiment saved metric',
    tags: TAGS,
    scopes: ['experiment:write'],
    body: savedMetricBody,
    responses: { 200: { description: 'Updated', schema: savedMetricSchema } },
    handler: updateSavedMetric,
  }),
  defineRoute({
    method: 'DELETE',
    path: `${P}/:id`,
    params: ID,
    summary: 'Delete an experiment saved metric',
    tags: TAGS,
    scopes: ['experiment:write'],
    responses: { 204: { description: 'Deleted' } },
    handler: deleteSavedMetric,
  }),
];
