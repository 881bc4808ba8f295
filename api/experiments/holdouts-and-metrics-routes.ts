// Experiment holdouts and saved metrics: what holdout_id and saved_metrics_ids refer to.
import type { EntityManager } from '@mikro-orm/postgresql';
import { isoTimestamp } from '../../shared/time.ts';
import { notFound, validationError } from '../http/errors.ts';
import { PAGE_QUERY_PROPERTIES, pageOf, paginated, paginatedSchema } from '../http/pagination.ts';
import { defineRoute, type ApiContext } from '../http/routes.ts';
import { dateTime, nullableString, openObject, record, stringArray } from '../http/schemas.ts';
import { userBasic, userBasicSchema, userColumns } from '../users/serializers.ts';

interface Resource {
  table: 'experiment_holdout' | 'experiment_saved_metric';
  path: string;
  tag: string;
  order: string;
  body: Record<string, unknown>;
  /** Checks and normalises a create/update body; `partial` for PATCH. */
  clean: (body: Record<string, any>, partial: boolean) => Record<string, unknown>;
  serialize: (row: any) => Record<string, unknown>;
  schema: Record<string, unknown>;
  /** After a write: keep dependent state (flags of experiments in a holdout) in step. */
  afterWrite?: (em: EntityManager, row: any, deleted: boolean) => Promise<void>;
}

function holdoutFilters(filters: unknown, partial: boolean): unknown[] | undefined {
  if (filters === undefined && partial) return undefined;
  if (!Array.isArray(filters) || filters.length === 0)
    throw validationError('Filters are required to create an holdout group', 'filters');
  for (const f of filters) {
    if (
      !f ||
      typeof f !== 'object' ||
      (f as any).rollout_percentage === undefined ||
      (f as any).rollout_percentage === null
    )
      throw validationError('Rollout percentage must be present.', 'filters');
    const p = Number((f as any).rollout_percentage);
    if (!Number.isFinite(p) || p < 0 || p > 100)
      throw validationError('Rollout percentage must be between 0 and 100.', 'filters');
  }
  return filters;
}

const common = (row: any) => ({
  id: row.id,
  name: row.name,
  description: row.description,
  created_by: userBasic(row, 'creator'),
  created_at: isoTimestamp(row.created_at),
  updated_at: isoTimestamp(row.updated_at),
});
const commonSchema = {
  id: { type: 'integer' },
  name: { type: 'string' },
  description: nullableString,
  created_by: userBasicSchema,
  created_at: dateTime,
  updated_at: dateTime,
};

const HOLDOUTS: Resource = {
  table: 'experiment_holdout',
  path: '/api/projects/:project_id/experiment_holdouts',
  tag: 'experiment holdouts',
  order: 'r.created_at desc, r.id desc',
  body: {
    type: 'object',
    properties: {
      name: { type: 'string', minLength: 1, maxLength: 400 },
      description: { type: ['string', 'null'], maxLength: 400 },
      filters: { type: 'array', maxItems: 20, items: {} },
    },
  },
  clean: (body, partial) => {
    if (!partial && !body.name) throw validationError('This field is required.', 'name', 'required');
    const out: Record<string, unknown> = {};
    if (body.name !== undefined) out.name = body.name;
    if (body.description !== undefined) out.description = body.description;
    const filters = holdoutFilters(body.filters, partial);
    if (filters) out.filters = JSON.stringify(filters);
    return out;
  },
  serialize: (row) => ({ ...common(row), filters: row.filters }),
  schema: record({
    ...commonSchema,
    filters: { type: 'array', items: openObject('A group: rollout_percentage, properties, variant') },
  }),
  // Each filter is the holdout's variant; flags of its experiments follow its filters (or lose it).
  afterWrite: async (em, row, deleted) => {
    const conn = em.getConnection();
    const txc = em.getTransactionContext();
    let groups: unknown = null;
    if (!deleted) {
      groups = (row.filters as any[]).map((f) => ({ ...f, variant: `holdout-${row.id}` }));
      await conn.execute(
        `update experiment_holdout set filters = ?::jsonb where id = ?`,
        [JSON.stringify(groups), row.id],
        'run',
        txc,
      );
      row.filters = groups;
    }
    const holdout = groups
      ? { id: row.id, exclusion_percentage: Number((groups as any[])[0]?.rollout_percentage ?? 0) }
      : null;
    await conn.execute(
      `update feature_flag f set filters = f.filters || jsonb_build_object('holdout_groups', ?::jsonb, 'holdout', ?::jsonb), version = version + 1
        where f.id in (select feature_flag_id from experiment where holdout_id = ?)`,
      [JSON.stringify(groups), JSON.stringify(holdout), row.id],
      'run',
      txc,
    );
  },
};

const METRIC_KINDS = ['ExperimentMetric', 'ExperimentTrendsQuery', 'ExperimentFunnelsQuery'];
const SAVED_METRICS: Resource = {
  table: 'experiment_saved_metric',
  path: '/api/projects/:project_id/experiment_saved_metrics',
  tag: 'experiment saved metrics',
  order: 'lower(r.name), r.id',
  body: {
    type: 'object',
    properties: {
      name: { type: 'string', minLength: 1, maxLength: 400 },
      description: { type: ['string', 'null'], maxLength: 400 },
      query: { type: 'object', additionalProperties: true },
      tags: { type: 'array', items: { type: 'string', maxLength: 255 }, maxItems: 50 },
    },
  },
  clean: (body, partial) => {
    if (!partial && !body.name) throw validationError('This field is required.', 'name', 'required');
    const out: Record<string, unknown> = {};
    if (body.name !== undefined) out.name = body.name;
    if (body.description !== undefined) out.description = body.description;
    if (body.tags !== undefined)
      out.tags = `{${[...new Set<string>(body.tags)].map((t) => JSON.stringify(t)).join(',')}}`;
    if (body.query !== undefined || !partial) {
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
      out.query = JSON.stringify(query);
    }
    return out;
  },
  serialize: (row) => ({ ...common(row), query: row.query, tags: row.tags ?? [] }),
  schema: record({ ...commonSchema, query: openObject('The metric query (kind, metric_type …)'), tags: stringArray }),
};

const JSONB_COLUMNS = new Set(['filters', 'query']);

function routesFor(r: Resource) {
  const select = `select r.*, ${userColumns('u', 'creator')} from ${r.table} r left join app_user u on u.id = r.created_by_id`;
  const find = async (ctx: ApiContext, id = ctx.state.params.id) => {
    if (!/^\d{1,9}$/.test(String(id))) throw notFound();
    const [row] = await ctx.state.em
      .getConnection()
      .execute<any[]>(`${select} where r.project_id = ? and r.id = ?`, [ctx.state.project.id, id]);
    if (!row) throw notFound();
    return row;
  };
  const write = async (ctx: ApiContext, id: number | null) => {
    const fields = r.clean(ctx.state.body ?? {}, id !== null);
    const columns = Object.keys(fields);
    const cast = (c: string) => (JSONB_COLUMNS.has(c) ? '?::jsonb' : c === 'tags' ? '?::text[]' : '?');
    let rowId = id;
    await ctx.state.em.fork().transactional(async (tx) => {
      const conn = tx.getConnection();
      const txc = tx.getTransactionContext();
      if (id === null) {
        const [row] = await conn.execute<any[]>(
          `insert into ${r.table} (project_id, created_by_id, ${columns.join(', ')}) values (?, ?, ${columns.map(cast).join(', ')}) returning id`,
          [ctx.state.project.id, ctx.state.auth.userId, ...Object.values(fields)],
          'all',
          txc,
        );
        rowId = row.id;
      } else if (columns.length) {
        await conn.execute(
          `update ${r.table} set ${columns.map((c) => `${c} = ${cast(c)}`).join(', ')}, updated_at = now() where id = ?`,
          [...Object.values(fields), id],
          'run',
          txc,
        );
      }
      if (r.afterWrite && (id === null || 'filters' in fields)) {
        const [row] = await conn.execute<any[]>(`select * from ${r.table} where id = ?`, [rowId], 'all', txc);
        await r.afterWrite(tx as EntityManager, row, false);
      }
    });
    return find(ctx, String(rowId));
  };
  const idPath = `${r.path}/:id`;
  return [
    defineRoute({
      method: 'GET',
      path: r.path,
      summary: `List ${r.tag}`,
      tags: [r.tag],
      scopes: ['experiment:read'],
      query: { type: 'object', properties: PAGE_QUERY_PROPERTIES },
      responses: { 200: { description: 'A page', schema: paginatedSchema(r.schema) } },
      handler: async (ctx) => {
        const page = pageOf(ctx.state.query);
        const conn = ctx.state.em.getConnection();
        const [{ count }] = await conn.execute<any[]>(
          `select count(*)::int as count from ${r.table} where project_id = ?`,
          [ctx.state.project.id],
        );
        const rows = await conn.execute<any[]>(
          `${select} where r.project_id = ? order by ${r.order} limit ? offset ?`,
          [ctx.state.project.id, page.limit, page.offset],
        );
        ctx.body = paginated(ctx, page, count, rows.map(r.serialize));
      },
    }),
    defineRoute({
      method: 'POST',
      path: r.path,
      summary: `Create one of the ${r.tag}`,
      tags: [r.tag],
      scopes: ['experiment:write'],
      body: r.body,
      responses: { 201: { description: 'Created', schema: r.schema } },
      handler: async (ctx) => {
        const row = await write(ctx, null);
        ctx.status = 201;
        ctx.body = r.serialize(row);
      },
    }),
    defineRoute({
      method: 'GET',
      path: idPath,
      summary: `Retrieve one of the ${r.tag}`,
      tags: [r.tag],
      scopes: ['experiment:read'],
      responses: { 200: { description: 'Found', schema: r.schema } },
      handler: async (ctx) => {
        ctx.body = r.serialize(await find(ctx));
      },
    }),
    defineRoute({
      method: 'PATCH',
      path: idPath,
      summary: `Update one of the ${r.tag}`,
      tags: [r.tag],
      scopes: ['experiment:write'],
      body: r.body,
      responses: { 200: { description: 'Updated', schema: r.schema } },
      handler: async (ctx) => {
        const existing = await find(ctx);
        ctx.body = r.serialize(await write(ctx, existing.id));
      },
    }),
    defineRoute({
      method: 'DELETE',
      path: idPath,
      summary: `Delete one of the ${r.tag}`,
      tags: [r.tag],
      scopes: ['experiment:write'],
      responses: { 204: { description: 'Deleted' } },
      handler: async (ctx) => {
        const row = await find(ctx);
        await ctx.state.em.fork().transactional(async (tx) => {
          if (r.afterWrite) await r.afterWrite(tx as EntityManager, row, true);
          await tx
            .getConnection()
            .execute(`delete from ${r.table} where id = ?`, [row.id], 'run', tx.getTransactionContext());
        });
        ctx.status = 204;
      },
    }),
  ];
}

export const holdoutRoutes = routesFor(HOLDOUTS);
export const savedMetricRoutes = routesFor(SAVED_METRICS);
