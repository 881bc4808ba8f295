import { isUuid } from '../../shared/platform/db/sql.ts';
import { changeDefinition, EventDefinitionInputError, removeDefinition } from '../../shared/event-definitions/index.ts';
import * as store from '../../shared/event-definitions/index.ts';
import { type EventViolations, violationsByEvent } from '../../shared/tracking-plan/index.ts';
import { isoTimestamp } from '../../shared/platform/time.ts';
import { notFound, validationError } from '../http/errors.ts';
import { pageOf, paginated, paginatedSchema } from '../http/pagination.ts';
import { actorOf, type ApiContext, defineRoute } from '../http/routes.ts';
import { record } from '../http/schemas.ts';
import { definitionSchema, listQuery, updateBody } from './schemas.ts';

const P = '/api/projects/:project_id/event_definitions';
const ID = { id: { type: 'string', format: 'uuid', description: "The event definition's id" } };

const TAGS = ['event definitions'];

function serialize(row: store.DefinitionRow, violations: Map<string, EventViolations>) {
  return {
    id: row.id,
    name: row.name,
    owner: row.owner,
    description: row.description,
    tags: row.tags ?? [],
    created_at: isoTimestamp(row.created_at),
    updated_at: isoTimestamp(row.updated_at),
    updated_by: row.updated_by,
    last_seen_at: isoTimestamp(row.last_seen_at),
    verified: row.verified,
    verified_at: isoTimestamp(row.verified_at),
    verified_by: row.verified_by,
    hidden: row.hidden,
    is_action: false,
    post_to_slack: row.post_to_slack,
    default_columns: row.default_columns ?? [],
    volume_30_day: null,
    query_usage_30_day: null,
    // Ours (PostHog clients ignore it): the tracking plan's violation counters of this event.
    plan_violations: violations.get(row.name) ?? { total: 0, counts: [] },
  };
}

/** The violation counters of these definitions' events. */
const violationsOf = (ctx: ApiContext, rows: store.DefinitionRow[]) =>
  violationsByEvent(
    ctx.state.em,
    ctx.state.project.id,
    rows.map((r) => r.name),
  );

async function findDefinition(ctx: ApiContext): Promise<store.DefinitionRow> {
  const id = ctx.state.params.id;
  if (!isUuid(id)) throw notFound();
  const row = await store.findDefinition(ctx.state.em, ctx.state.project.id, id);
  if (!row) throw notFound();
  return row;
}

const list = defineRoute({
  method: 'GET',
  path: P,
  summary: 'List event definitions (search, event_type, excluded_properties, exclude_hidden, ordering)',
  tags: TAGS,
  scopes: ['event_definition:read'],
  query: listQuery,
  responses: { 200: { description: 'A page of event definitions', schema: paginatedSchema(definitionSchema) } },
  handler: async (ctx) => {
    const q = ctx.state.query;
    let excluded: string[] | undefined;
    if (q.excluded_properties) {
      let parsed: unknown;
      try {
        parsed = JSON.parse(q.excluded_properties);
      } catch {
        parsed = null;
      }
      if (!Array.isArray(parsed))
        throw validationError('excluded_properties must be a JSON array of event names.', 'excluded_properties');
      excluded = [...new Set(parsed.map(String))];
    }
    const filter = {
      // NUL cannot be bound as a PostgreSQL text parameter.
      terms: String(q.search ?? '')
        .replaceAll('\u0000', '')
        .split(' ')
        .filter(Boolean),
      eventType: q.event_type,
      excluded,
      excludeHidden: q.exclude_hidden === true,
    };
    const page = pageOf(q);
    const { count, rows } = await store.listDefinitions(ctx.state.em, ctx.state.project.id, filter, q.ordering, page);
    await store.countReads(
      ctx.state.em,
      rows.map((r) => r.id),
    );
    const violations = await violationsOf(ctx, rows);
    ctx.body = paginated(
      ctx,
      page,
      count,
      rows.map((r) => serialize(r, violations)),
    );
  },
});

/** PATCH, and PUT below (DRF's full update: as PATCH, and post_to_slack is false unless sent). */
const update = defineRoute({
  method: 'PATCH',
  path: `${P}/:id`,
  params: ID,
  summary: 'Update description, tags, owner, verified, hidden, default_columns',
  tags: TAGS,
  scopes: ['event_definition:write'],
  body: updateBody,
  responses: { 200: { description: 'The updated definition', schema: definitionSchema } },
  handler: async (ctx) => {
    const before = await findDefinition(ctx);
    // PUT is DRF's full update: a field with a default (post_to_slack: false) takes it when left out.
    const body = ctx.method === 'PUT' ? { post_to_slack: false, ...ctx.state.body } : ctx.state.body;
    try {
      await changeDefinition(ctx.state.em, actorOf(ctx), before, body);
    } catch (error) {
      if (error instanceof EventDefinitionInputError) throw validationError(error.message, error.attr);
      throw error;
    }
    const after = await findDefinition(ctx);
    ctx.body = serialize(after, await violationsOf(ctx, [after]));
  },
});

export const eventDefinitionRoutes = [
  list,
  defineRoute({
    method: 'GET',
    path: `${P}/:id`,
    params: ID,
    summary: 'Retrieve an event definition',
    tags: TAGS,
    scopes: ['event_definition:read'],
    responses: { 200: { description: 'The definition', schema: definitionSchema }, 404: { description: 'Not found' } },
    handler: async (ctx) => {
      const row = await findDefinition(ctx);
      await store.countReads(ctx.state.em, [row.id]);
      ctx.body = serialize(row, await violationsOf(ctx, [row]));
    },
  }),
  update,
  {
    ...update,
    method: 'PUT',
    summary: 'Update an event definition (full update: as PATCH, and post_to_slack is false unless sent)',
  } as const,
  defineRoute({
    method: 'DELETE',
    path: `${P}/:id`,
    params: ID,
    summary: 'Delete an event definition (events are kept; a later event recreates it)',
    tags: TAGS,
    scopes: ['event_definition:write'],
    responses: { 204: { description: 'Deleted' }, 404: { description: 'Not found' } },
    handler: async (ctx) => {
      const row = await findDefinition(ctx);
      await removeDefinition(ctx.state.em, actorOf(ctx), row);
      ctx.status = 204;
    },
  }),
  defineRoute({
    method: 'GET',
    path: `${P}/:id/metrics`,
    params: ID,
    summary: 'How often the definition was read through the API in the last 30 days (any valid key)',
    tags: TAGS,
    scopes: [],
    responses: { 200: { description: 'Usage', schema: record({ query_usage_30_day: { type: 'integer' } }) } },
    handler: async (ctx) => {
      const row = await findDefinition(ctx);
      ctx.body = { query_usage_30_day: await store.readsInLast30Days(ctx.state.em, row.id) };
    },
  }),
];
