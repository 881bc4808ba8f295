// Experiment saved metrics: reusable metric queries that experiments link by saved_metrics_ids.
import { isId } from '../../shared/platform/ids.ts';
import * as store from '../../shared/experiments/index.ts';
import { notFound } from '../http/errors.ts';
import { PAGE_QUERY_PROPERTIES, pageOf, paginated, paginatedSchema } from '../http/pagination.ts';
import { type ApiContext, defineRoute } from '../http/routes.ts';
import { savedMetricFields } from '../../shared/experiments/index.ts';
import { applyingRules } from './errors.ts';
import { integerIdParam, openObject, record, stringArray } from '../http/schemas.ts';
import { savedMetricBody } from './schemas.ts';
import { sideRowBase, sideRowBaseSchema } from './serializers.ts';

const P = '/api/projects/:project_id/experiment_saved_metrics';
const ID = integerIdParam('saved metric');
const TAGS = ['experiment saved metrics'];

const savedMetricSchema = record({
  ...sideRowBaseSchema,
  query: openObject('The metric query (kind, metric_type …)'),
  tags: stringArray,
});

const serialize = (row: store.SavedMetricRow) => ({ ...sideRowBase(row), query: row.query, tags: row.tags ?? [] });

async function find(ctx: ApiContext, id: string | number = ctx.state.params.id) {
  const row = isId(String(id)) && (await store.findSavedMetric(ctx.state.em, ctx.state.project.id, Number(id)));
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
    const fields = await applyingRules(() => savedMetricFields(ctx.state.body ?? {}, false));
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
    const fields = await applyingRules(() => savedMetricFields(ctx.state.body ?? {}, true));
    await store.updateSavedMetric(ctx.state.em, existing.id, fields);
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
