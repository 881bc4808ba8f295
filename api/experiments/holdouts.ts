// Experiment holdouts: what an experiment's holdout_id refers to. Each filter group becomes the
// holdout's variant, and the flags of its experiments follow its groups (or lose them on delete).
import { isId } from '../../shared/platform/ids.ts';
import * as store from '../../shared/experiments/index.ts';
import { notFound } from '../http/errors.ts';
import { PAGE_QUERY_PROPERTIES, pageOf, paginated, paginatedSchema } from '../http/pagination.ts';
import { actorOf, type ApiContext, defineRoute } from '../http/routes.ts';
import * as rules from '../../shared/experiments/index.ts';
import { applyingRules } from './errors.ts';
import { integerIdParam, openObject, record } from '../http/schemas.ts';
import { holdoutBody } from './schemas.ts';
import { sideRowBase, sideRowBaseSchema } from './serializers.ts';

const P = '/api/projects/:project_id/experiment_holdouts';
const ID = integerIdParam('holdout');
const TAGS = ['experiment holdouts'];

const holdoutSchema = record({
  ...sideRowBaseSchema,
  filters: { type: 'array', items: openObject('A group: rollout_percentage, properties, variant') },
});

const serialize = (row: store.HoldoutRow) => ({ ...sideRowBase(row), filters: row.filters });

async function find(ctx: ApiContext, id: string | number = ctx.state.params.id) {
  const row = isId(String(id)) && (await store.findHoldout(ctx.state.em, ctx.state.project.id, Number(id)));
  if (!row) throw notFound();
  return row;
}

const listHoldouts = defineRoute({
  method: 'GET',
  path: P,
  summary: 'List experiment holdouts',
  tags: TAGS,
  scopes: ['experiment:read'],
  query: { type: 'object', properties: PAGE_QUERY_PROPERTIES },
  responses: { 200: { description: 'A page', schema: paginatedSchema(holdoutSchema) } },
  handler: async (ctx) => {
    const page = pageOf(ctx.state.query);
    const { count, rows } = await store.listHoldouts(ctx.state.em, ctx.state.project.id, page);
    ctx.body = paginated(ctx, page, count, rows.map(serialize));
  },
});

const createHoldout = defineRoute({
  method: 'POST',
  path: P,
  summary: 'Create an experiment holdout',
  tags: TAGS,
  scopes: ['experiment:write'],
  body: holdoutBody,
  responses: { 201: { description: 'Created', schema: holdoutSchema } },
  handler: async (ctx) => {
    const fields = await applyingRules(() => rules.holdoutFields(ctx.state.body ?? {}, false));
    const id = await rules.createHoldout(ctx.state.em, actorOf(ctx), { ...fields, name: fields.name ?? '' });
    ctx.status = 201;
    ctx.body = serialize(await find(ctx, id));
  },
});

const getHoldout = defineRoute({
  method: 'GET',
  path: `${P}/:id`,
  params: ID,
  summary: 'Retrieve an experiment holdout',
  tags: TAGS,
  scopes: ['experiment:read'],
  responses: { 200: { description: 'Found', schema: holdoutSchema } },
  handler: async (ctx) => {
    ctx.body = serialize(await find(ctx));
  },
});

const updateHoldout = defineRoute({
  method: 'PATCH',
  path: `${P}/:id`,
  params: ID,
  summary: 'Update an experiment holdout',
  tags: TAGS,
  scopes: ['experiment:write'],
  body: holdoutBody,
  responses: { 200: { description: 'Updated', schema: holdoutSchema } },
  handler: async (ctx) => {
    const existing = await find(ctx);
    const fields = await applyingRules(() => rules.holdoutFields(ctx.state.body ?? {}, true));
    await rules.changeHoldout(ctx.state.em, existing.id, fields);
    ctx.body = serialize(await find(ctx));
  },
});

const deleteHoldout = defineRoute({
  method: 'DELETE',
  path: `${P}/:id`,
  params: ID,
  summary: 'Delete an experiment holdout',
  tags: TAGS,
  scopes: ['experiment:write'],
  responses: { 204: { description: 'Deleted' } },
  handler: async (ctx) => {
    const existing = await find(ctx);
    await rules.removeHoldout(ctx.state.em, existing.id);
    ctx.status = 204;
  },
});

export const holdoutRoutes = [listHoldouts, createHoldout, getHoldout, updateHoldout, deleteHoldout];
