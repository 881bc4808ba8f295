// Experiment holdouts: what an experiment's holdout_id refers to. Each filter group becomes the
// holdout's variant, and the flags of its experiments follow its groups (or lose them on delete).
import type { EntityManager } from '@mikro-orm/postgresql';
import * as store from '../../shared/experiments/holdout-and-metric-store.ts';
import { notFound, validationError } from '../http/errors.ts';
import { PAGE_QUERY_PROPERTIES, pageOf, paginated, paginatedSchema } from '../http/pagination.ts';
import { defineRoute, type ApiContext } from '../http/routes.ts';
import { integerIdParam, openObject, record } from '../http/schemas.ts';
import { type HoldoutBody, holdoutBody } from './schemas.ts';
import { sideRowBase, sideRowBaseSchema } from './serializers.ts';

const P = '/api/projects/:project_id/experiment_holdouts';
const ID = integerIdParam('holdout');
const TABLE = 'experiment_holdout';
const TAGS = ['experiment holdouts'];

const holdoutSchema = record({
  ...sideRowBaseSchema,
  filters: { type: 'array', items: openObject('A group: rollout_percentage, properties, variant') },
});

const serialize = (row: Record<string, any>) => ({ ...sideRowBase(row), filters: row.filters });

/** The columns a create (or, `partial`, an update) body sets. */
function columnsOf(body: Record<string, any>, partial: boolean): Record<string, unknown> {
  if (!partial && !body.name) throw validationError('This field is required.', 'name', 'required');
  const out: Record<string, unknown> = {};
  if (body.name !== undefined) out.name = body.name;
  if (body.description !== undefined) out.description = body.description;
  if (body.filters === undefined && partial) return out;
  const filters = body.filters;
  if (!Array.isArray(filters) || filters.length === 0)
    throw validationError('Filters are required to create an holdout group', 'filters');
  for (const f of filters) {
    if (!f || typeof f !== 'object' || f.rollout_percentage === undefined || f.rollout_percentage === null)
      throw validationError('Rollout percentage must be present.', 'filters');
    const p = Number(f.rollout_percentage);
    if (!Number.isFinite(p) || p < 0 || p > 100)
      throw validationError('Rollout percentage must be between 0 and 100.', 'filters');
  }
  out.filters = filters;
  return out;
}

/** Tags each group with the holdout's variant and puts the groups on its experiments' flags. */
async function syncFlags(tx: EntityManager, id: number, filters: unknown[] | null) {
  const groups = filters ? filters.map((f) => ({ ...(f as object), variant: `holdout-${id}` })) : null;
  const exclusion = Number((groups?.[0] as { rollout_percentage?: unknown })?.rollout_percentage ?? 0);
  await store.setHoldoutGroups(tx, id, groups, groups ? { id, exclusion_percentage: exclusion } : null);
}

async function find(ctx: ApiContext, id: string | number = ctx.state.params.id) {
  const row = /^\d{1,9}$/.test(String(id)) && (await store.findSideRow(ctx.state.em, TABLE, ctx.state.project.id, id));
  if (!row) throw notFound();
  return row;
}

async function listHoldouts(ctx: ApiContext) {
  const page = pageOf(ctx.state.query);
  const { count, rows } = await store.listSideRows(ctx.state.em, TABLE, ctx.state.project.id, page);
  ctx.body = paginated(ctx, page, count, rows.map(serialize));
}

async function createHoldout(ctx: ApiContext<Record<string, unknown>, HoldoutBody>) {
  const columns = columnsOf(ctx.state.body ?? {}, false);
  const id = await ctx.state.em.fork().transactional(async (tx) => {
    const created = await store.insertSideRow(tx, TABLE, ctx.state.project.id, ctx.state.auth.userId, columns);
    await syncFlags(tx, created, ctx.state.body.filters ?? null);
    return created;
  });
  ctx.status = 201;
  ctx.body = serialize(await find(ctx, id));
}

async function getHoldout(ctx: ApiContext) {
  ctx.body = serialize(await find(ctx));
}

async function updateHoldout(ctx: ApiContext<Record<string, unknown>, HoldoutBody>) {
  const existing = await find(ctx);
  const columns = columnsOf(ctx.state.body ?? {}, true);
  await ctx.state.em.fork().transactional(async (tx) => {
    await store.updateSideRow(tx, TABLE, existing.id, columns);
    if ('filters' in columns) await syncFlags(tx, existing.id, ctx.state.body.filters ?? null);
  });
  ctx.body = serialize(await find(ctx));
}

async function deleteHoldout(ctx: ApiContext) {
  const existing = await find(ctx);
  await ctx.state.em.fork().transactional(async (tx) => {
    await syncFlags(tx, existing.id, null);
    await store.deleteSideRow(tx, TABLE, existing.id);
  });
  ctx.status = 204;
}

export const holdoutRoutes = [
  defineRoute({
    method: 'GET',
    path: P,
    summary: 'List experiment holdouts',
    tags: TAGS,
    scopes: ['experiment:read'],
    query: { type: 'object', properties: PAGE_QUERY_PROPERTIES },
    responses: { 200: { description: 'A page', schema: paginatedSchema(holdoutSchema) } },
    handler: listHoldouts,
  }),
  defineRoute({
    method: 'POST',
    path: P,
    summary: 'Create an experiment holdout',
    tags: TAGS,
    scopes: ['experiment:write'],
    body: holdoutBody,
    responses: { 201: { description: 'Created', schema: holdoutSchema } },
    handler: createHoldout,
  }),
  defineRoute({
    method: 'GET',
    path: `${P}/:id`,
    params: ID,
    summary: 'Retrieve an experiment holdout',
    tags: TAGS,
    scopes: ['experiment:read'],
    responses: { 200: { description: 'Found', schema: holdoutSchema } },
    handler: getHoldout,
  }),
  defineRoute({
    method: 'PATCH',
    path: `${P}/:id`,
    params: ID,
    summary: 'Update an experiment holdout',
    tags: TAGS,
    scopes: ['experiment:write'],
    body: holdoutBody,
    responses: { 200: { description: 'Updated', schema: holdoutSchema } },
    handler: updateHoldout,
  }),
  defineRoute({
    method: 'DELETE',
    path: `${P}/:id`,
    params: ID,
    summary: 'Delete an experiment holdout',
    tags: TAGS,
    scopes: ['experiment:write'],
    responses: { 204: { description: 'Deleted' } },
    handler: deleteHoldout,
  }),
];
