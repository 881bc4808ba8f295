// Experiment holdouts: what an experiment's holdout_id refers to. Each filter group becomes the
// holdout's variant, and the flags of its experiments follow its groups (or lose them on delete).
import type { EntityManager } from '@mikro-orm/postgresql';
import * as store from '../../shared/experiments/holdout-and-metric-store.ts';
import { notFound, validationError } from '../http/errors.ts';
import { PAGE_QUERY_PROPERTIES, pageOf, paginated, paginatedSchema } from '../http/pagination.ts';
import { type ApiContext, defineRoute } from '../http/routes.ts';
import { integerIdParam, openObject, record } from '../http/schemas.ts';
import { type HoldoutBody, holdoutBody } from './schemas.ts';
import { sideRowBase, sideRowBaseSchema } from './serializers.ts';

const P = '/api/projects/:project_id/experiment_holdouts';
const ID = integerIdParam('holdout');
const TAGS = ['experiment holdouts'];

const holdoutSchema = record({
  ...sideRowBaseSchema,
  filters: { type: 'array', items: openObject('A group: rollout_percentage, properties, variant') },
});

const serialize = (row: store.HoldoutRow) => ({ ...sideRowBase(row), filters: row.filters });

/** The fields a create (or, `partial`, an update) body sets. */
function fieldsOf(body: HoldoutBody, partial: boolean): store.HoldoutFields {
  if (!partial && !body.name) throw validationError('This field is required.', 'name', 'required');
  const out: store.HoldoutFields = {};
  if (body.name !== undefined) out.name = body.name;
  if (body.description !== undefined) out.description = body.description;
  if (body.filters === undefined && partial) return out;
  const filters = body.filters;
  if (!Array.isArray(filters) || filters.length === 0)
    throw validationError('Filters are required to create an holdout group', 'filters');
  for (const f of filters as unknown[]) {
    const rollout = (f as { rollout_percentage?: unknown } | null)?.rollout_percentage;
    if (!f || typeof f !== 'object' || rollout === undefined || rollout === null)
      throw validationError('Rollout percentage must be present.', 'filters');
    const p = Number(rollout);
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
  const row = /^\d{1,9}$/.test(String(id)) && (await store.findHoldout(ctx.state.em, ctx.state.project.id, Number(id)));
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
    const body = ctx.state.body ?? {};
    const fields = fieldsOf(body, false);
    const id = await ctx.state.em.fork().transactional(async (tx) => {
      const created = await store.insertHoldout(tx, ctx.state.project.id, ctx.state.auth.userId, {
        ...fields,
        name: fields.name ?? '',
      });
      await syncFlags(tx, created, body.filters ?? null);
      return created;
    });
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
    const body = ctx.state.body ?? {};
    const fields = fieldsOf(body, true);
    await ctx.state.em.fork().transactional(async (tx) => {
      await store.updateHoldout(tx, existing.id, fields);
      if ('filters' in fields) await syncFlags(tx, existing.id, body.filters ?? null);
    });
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
    await ctx.state.em.fork().transactional(async (tx) => {
      await syncFlags(tx, existing.id, null);
      await store.deleteHoldout(tx, existing.id);
    });
    ctx.status = 204;
  },
});

export const holdoutRoutes = [listHoldouts, createHoldout, getHoldout, updateHoldout, deleteHoldout];
