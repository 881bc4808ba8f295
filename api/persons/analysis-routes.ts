import { activityPage as storedActivityPage } from '../../shared/platform/activity-log.ts';
import type { Page, PersonIdPage } from '../../shared/events/index.ts';
import { personCohorts as cohortsOfPerson } from '../../shared/cohorts/index.ts';
import { propertiesTimeline as timelineOf } from '../../shared/persons/index.ts';
import { isoTimestamp } from '../../shared/platform/time.ts';
import { ApiError, validationError } from '../http/errors.ts';
import { PAGE_QUERY_PROPERTIES, pageOf } from '../http/pagination.ts';
import { actorOf, defineRoute, type RouteContext } from '../http/routes.ts';
import { fieldOf, funnelParams, funnelStep, lifecycleType, parseDate, parseEventSteps } from './analysis.ts';
import { csvOfAnswer, FORMAT_QUERY as FORMAT } from './csv.ts';
import { personsRead } from '../http/access-log.ts';
import { findPerson, PERSON_ID } from './queries.ts';
import { orderedDistinctIds, splitPerson as splitStoredPerson } from '../../shared/persons/index.ts';
import { personsByIds } from '../../shared/persons/index.ts';
import { personListItem, personListItemSchema } from './serializers.ts';
import {
  dateTime,
  nullableDateTime,
  nullableInteger,
  nullableString,
  openObject,
  record,
  stringArray,
} from '../http/schemas.ts';

const P = '/api/projects/:project_id/persons';
// format=csv: a {results} envelope's results (activity, cohorts), else the answer itself (split), one row each.
const CSV = csvOfAnswer();

// ---- activity ----
const activityQuery = {
  type: 'object',
  properties: {
    ...FORMAT,
    page: { type: 'integer', minimum: 1, maximum: 1_000_000, default: 1 },
    limit: { type: 'integer', minimum: 1, maximum: 1000, default: 10 },
  },
} as const;
const activitySchema = {
  type: 'object',
  required: ['results', 'next', 'previous', 'total_count'],
  properties: {
    results: {
      type: 'array',
      items: record({
        id: { type: 'string', format: 'uuid' },
        user: record(
          { first_name: { type: 'string' }, email: nullableString, is_system: { const: true } },
          { optional: ['is_system'] },
        ),
        activity: { type: 'string' },
        scope: { type: 'string' },
        item_id: nullableString,
        detail: openObject('changes, name, short_id, type, trigger'),
        created_at: dateTime,
      }),
    },
    next: { type: ['string', 'null'] },
    previous: { type: ['string', 'null'] },
    total_count: { type: 'integer' },
  },
};

/** A page of the persons' activity log: of one person (`person`), or of every person of the project. */
async function activityPage(ctx: RouteContext<typeof activityQuery>, person: { id: string; uuid: string } | null) {
  const { page = 1, limit = 10 } = ctx.state.query;
  const { count, rows } = await storedActivityPage(ctx.state.em, ctx.state.project.id, 'Person', person?.id ?? null, {
    limit,
    offset: (page - 1) * limit,
  });
  // The persons whose changes the page shows (a deleted person's rows name no one who still exists).
  if (person) personsRead(ctx, [person.uuid]);
  else {
    const ids = [...new Set(rows.map((r) => r.item_id).filter((id): id is string => id !== null))];
    const existing = ids.length ? await personsByIds(ctx.state.em, ctx.state.project.id, ids) : [];
    personsRead(
      ctx,
      existing.map((p) => p.uuid),
    );
  }
  const link = (p: number) => {
    const url = new URL(`${ctx.protocol}://${ctx.host}${ctx.state.requestPath}`);
    url.searchParams.set('page', String(p));
    url.searchParams.set('limit', String(limit));
    return url.toString();
  };
  ctx.body = {
    results: rows.map((r) => ({
      id: r.id,
      user: r.is_system
        ? { first_name: 'System', email: null, is_system: true }
        : { first_name: r.first_name ?? '', email: r.email ?? null },
      activity: r.activity,
      scope: r.scope,
      item_id: r.item_id,
      detail: r.detail,
      created_at: isoTimestamp(r.created_at),
    })),
    next: page * limit < count ? link(page + 1) : null,
    previous: page > 1 ? link(page - 1) : null,
    total_count: count,
  };
}

// ---- split ----
const splitQuery = { type: 'object', properties: FORMAT } as const;
const splitBody = { type: 'object', properties: { main_distinct_id: {}, distinct_ids_to_split: {} } } as const;

async function splitPerson(ctx: RouteContext<typeof splitQuery, typeof splitBody>) {
  const person = await findPerson(ctx.state.em, ctx.state.project.id, ctx.state.params.id);
  const body = ctx.state.body;
  const ids = orderedDistinctIds(person.distinct_ids);
  let toSplit: string[];
  if (body.distinct_ids_to_split !== undefined && body.distinct_ids_to_split !== null) {
    if (body.main_distinct_id !== undefined && body.main_distinct_id !== null)
      throw validationError('main_distinct_id cannot be combined with distinct_ids_to_split', 'distinct_ids_to_split');
    if (!Array.isArray(body.distinct_ids_to_split) || !body.distinct_ids_to_split.every((d) => typeof d === 'string'))
      throw validationError('must be a list of strings', 'distinct_ids_to_split');
    if (body.distinct_ids_to_split.length === 0) throw validationError('must not be empty', 'distinct_ids_to_split');
    const foreign = body.distinct_ids_to_split.filter((d) => !ids.includes(d));
    if (foreign.length)
      throw validationError(`not on this person: ${JSON.stringify(foreign)}`, 'distinct_ids_to_split');
    toSplit = [...new Set(body.distinct_ids_to_split as string[])];
  } else {
    if (
      body.main_distinct_id !== undefined &&
      body.main_distinct_id !== null &&
      typeof body.main_distinct_id !== 'string'
    )
      throw validationError('Not a valid string.', 'main_distinct_id');
    const main = (body.main_distinct_id as string | undefined) ?? ids[0];
    if (!ids.includes(main)) throw validationError(`not on this person: ${JSON.stringify([main])}`, 'main_distinct_id');
    toSplit = ids.filter((d) => d !== main);
  }
  if (toSplit.length === 0) throw validationError('This person has only one distinct id: there is nothing to split.');
  await splitStoredPerson(ctx.state.em, actorOf(ctx), person, toSplit);
  ctx.body = { success: true, split_distinct_ids: toSplit };
}

// ---- properties timeline ----
const timelineQuery = {
  type: 'object',
  properties: {
    ...FORMAT,
    properties: { type: 'string', maxLength: 10_000 },
    breakdown: { type: 'string', maxLength: 400 },
    date_from: { type: 'string', maxLength: 40 },
    date_to: { type: 'string', maxLength: 40 },
  },
} as const;

async function propertiesTimeline(ctx: RouteContext<typeof timelineQuery>) {
  const person = await findPerson(ctx.state.em, ctx.state.project.id, ctx.state.params.id);
  const q = ctx.state.query;
  const from = parseDate(q.date_from, new Date(0), 'date_from');
  const to = parseDate(q.date_to, new Date(Date.now() + 86400_000), 'date_to');
  let crucial: string[] = [];
  if (typeof q.properties === 'string' && q.properties) {
    try {
      const filters: unknown = JSON.parse(q.properties);
      crucial = (Array.isArray(filters) ? filters : [filters])
        .map((f) => fieldOf(f, 'key'))
        .filter((k): k is string => typeof k === 'string');
    } catch {
      throw validationError('Properties filter must be a JSON array of property filters.', 'properties');
    }
  }
  if (typeof q.breakdown === 'string' && q.breakdown) crucial.push(q.breakdown);
  // Person properties over time, rebuilt from the person's own $set / $set_once / $unset history.
  const events = await ctx.deps.events.personEvents(ctx.state.project.id, person.id, to, 10_000);
  const points = timelineOf(events, from, crucial);
  personsRead(ctx, [person.uuid]);
  ctx.body = {
    points,
    crucial_property_keys: crucial,
    effective_date_from: isoTimestamp(from),
    effective_date_to: isoTimestamp(to),
  };
}

// ---- cohorts ----
const cohortsQuery = {
  type: 'object',
  properties: { ...FORMAT, person_id: { type: 'string', maxLength: 100 } },
} as const;

async function personCohorts(ctx: RouteContext<typeof cohortsQuery>) {
  const personId = ctx.state.query.person_id;
  if (typeof personId !== 'string' || personId === '')
    throw validationError('This field is required.', 'person_id', 'required');
  const person = await findPerson(ctx.state.em, ctx.state.project.id, personId);
  const results = await cohortsOfPerson(ctx.state.em, ctx.deps.events, ctx.state.project.id, person.id);
  personsRead(ctx, [person.uuid]);
  ctx.body = { results };
}

// ---- funnel, correlation, lifecycle: persons envelope ----
/** An analysis route's context: its query (the funnel's or the lifecycle's); a POST's body, unread until input(). */
type AnalysisContext<QS> = RouteContext<QS>;

function input(ctx: AnalysisContext<typeof funnelQuery | typeof lifecycleQuery>): Record<string, unknown> {
  return {
    ...ctx.state.query,
    ...(ctx.method === 'POST' && ctx.state.body && typeof ctx.state.body === 'object' ? ctx.state.body : {}),
  };
}

/** The persons envelope PostHog's actors endpoints answer with, for one page of an analytics answer. */
async function actorsResponse(
  ctx: AnalysisContext<typeof funnelQuery | typeof lifecycleQuery>,
  params: Record<string, unknown>,
  compute: (page: Page) => Promise<PersonIdPage>,
) {
  const page = pageOf(params);
  const { count, personIds } = await compute(page);
  const people = await personsByIds(ctx.state.em, ctx.state.project.id, personIds);
  personsRead(
    ctx,
    people.map((p) => p.uuid),
  );
  const url = new URL(
    `${ctx.protocol}://${ctx.host}${ctx.state.requestPath}${ctx.querystring ? `?${ctx.querystring}` : ''}`,
  );
  const initial = url.toString();
  url.searchParams.set('offset', String(page.offset + page.limit));
  url.searchParams.set('limit', String(page.limit));
  ctx.body = {
    results: [{ people: people.map(personListItem), count }],
    next: page.offset + page.limit < count ? url.toString() : null,
    initial,
    missing_persons: 0,
    is_cached: false,
    last_refresh: isoTimestamp(new Date()),
  };
}

async function funnelPersons(ctx: AnalysisContext<typeof funnelQuery>) {
  const params = input(ctx);
  const funnel = funnelParams(params);
  const step = funnelStep(params.funnel_step, funnel.steps.length);
  await actorsResponse(ctx, params, (page) =>
    ctx.deps.events.funnelPersonIds(ctx.state.project.id, funnel, step, page),
  );
}

async function funnelCorrelationPersons(ctx: AnalysisContext<typeof funnelQuery>) {
  const params = input(ctx);
  const funnel = funnelParams(params);
  const [entity] = parseEventSteps(
    typeof params.funnel_correlation_person_entity === 'string' &&
      !params.funnel_correlation_person_entity.trim().startsWith('[')
      ? `[${params.funnel_correlation_person_entity}]`
      : params.funnel_correlation_person_entity,
    'funnel_correlation_person_entity',
  );
  const converted = String(params.funnel_correlation_person_converted ?? 'true') !== 'false';
  const pageParams = {
    limit: params.funnel_correlation_person_limit ?? params.limit,
    offset: params.funnel_correlation_person_offset ?? params.offset,
  };
  await actorsResponse(ctx, pageParams, (page) =>
    ctx.deps.events.funnelCorrelationPersonIds(ctx.state.project.id, funnel, entity, converted, page),
  );
}

async function lifecyclePersons(ctx: AnalysisContext<typeof lifecycleQuery>) {
  const params = input(ctx);
  if (!params.target_date)
    throw new ApiError(400, 'validation_error', 'invalid_input', 'Must include specified date', 'target_date');
  if (!params.lifecycle_type)
    throw new ApiError(400, 'validation_error', 'invalid_input', 'Must include lifecycle type', 'lifecycle_type');
  const day = parseDate(params.target_date, new Date(), 'target_date');
  const event = params.events ? parseEventSteps(params.events)[0] : null;
  const lifecycle = {
    day,
    type: lifecycleType(String(params.lifecycle_type)),
    event,
    timezone: ctx.state.project.timezone,
  };
  await actorsResponse(ctx, params, (page) =>
    ctx.deps.events.lifecyclePersonIds(ctx.state.project.id, lifecycle, page),
  );
}

const actorsSchema = {
  type: 'object',
  required: ['results', 'next', 'initial', 'missing_persons', 'is_cached', 'last_refresh'],
  properties: {
    results: {
      type: 'array',
      items: record({ people: { type: 'array', items: personListItemSchema }, count: { type: 'integer' } }),
    },
    next: nullableString,
    initial: { type: 'string' },
    missing_persons: { type: 'integer' },
    is_cached: { type: 'boolean' },
    last_refresh: dateTime,
  },
};
// The persons of {results: [{people, count}]} are the CSV rows: the same columns as the list export.
const ACTORS_CSV = csvOfAnswer((answer: { results: { people: unknown[] }[] }) =>
  answer.results.flatMap((r) => r.people),
);
const funnelQuery = {
  type: 'object',
  properties: {
    ...PAGE_QUERY_PROPERTIES,
    ...FORMAT,
    events: {
      type: 'string',
      maxLength: 10_000,
      description: 'JSON array of steps: [{"id": "<event>", "order": 0}, …]',
    },
    funnel_step: { type: 'integer', description: 'N: persons who reached step N; -N: dropped off before step N' },
    funnel_window_days: { type: 'integer' },
    date_from: { type: 'string', maxLength: 40 },
    date_to: { type: 'string', maxLength: 40 },
    funnel_correlation_person_entity: { type: 'string', maxLength: 1000 },
    funnel_correlation_person_converted: { type: 'string', maxLength: 10 },
    funnel_correlation_person_limit: { type: 'integer' },
    funnel_correlation_person_offset: { type: 'integer' },
  },
} as const;
const funnelBody = { type: 'object', properties: { events: { type: 'array', maxItems: 10, items: {} } } } as const;
const lifecycleQuery = {
  type: 'object',
  properties: {
    ...PAGE_QUERY_PROPERTIES,
    ...FORMAT,
    target_date: { type: 'string', maxLength: 40 },
    lifecycle_type: { type: 'string', maxLength: 20 },
    events: { type: 'string', maxLength: 10_000 },
  },
} as const;

const timelineSchema = record({
  points: {
    type: 'array',
    items: record({
      timestamp: nullableDateTime,
      properties: openObject('The person properties from this point on'),
      relevant_event_count: { type: 'integer' },
    }),
  },
  crucial_property_keys: stringArray,
  effective_date_from: nullableDateTime,
  effective_date_to: nullableDateTime,
});

export const personAnalysisRoutes = [
  defineRoute({
    method: 'GET',
    path: `${P}/activity`,
    summary: 'Activity log of all persons',
    tags: ['persons'],
    scopes: ['activity_log:read'],
    personAccess: 'person_activity',
    query: activityQuery,
    responses: { 200: { description: 'Activity page', schema: activitySchema } },
    csv: CSV,
    handler: (ctx) => activityPage(ctx, null),
  }),
  defineRoute({
    method: 'GET',
    path: `${P}/:id/activity`,
    params: PERSON_ID,
    summary: 'Activity log of one person',
    tags: ['persons'],
    scopes: ['activity_log:read'],
    personAccess: 'person_activity',
    query: activityQuery,
    responses: { 200: { description: 'Activity page', schema: activitySchema } },
    csv: CSV,
    handler: async (ctx) =>
      activityPage(ctx, await findPerson(ctx.state.em, ctx.state.project.id, ctx.state.params.id)),
  }),
  defineRoute({
    method: 'POST',
    path: `${P}/:id/split`,
    params: PERSON_ID,
    summary: 'Split distinct ids off a merged person into persons of their own',
    tags: ['persons'],
    scopes: ['person:write'],
    query: splitQuery,
    body: splitBody,
    csv: CSV,
    responses: {
      200: {
        description: 'Split done',
        schema: record({ success: { const: true }, split_distinct_ids: stringArray }),
      },
    },
    handler: splitPerson,
  }),
  defineRoute({
    method: 'GET',
    path: `${P}/:id/properties_timeline`,
    params: PERSON_ID,
    summary: "Timeline of the person's properties, rebuilt from its events",
    tags: ['persons'],
    scopes: [],
    personAccess: 'person_properties_timeline',
    query: timelineQuery,
    responses: { 200: { description: 'Timeline', schema: timelineSchema } },
    csv: csvOfAnswer((answer) => answer.points), // one row per point in time
    handler: propertiesTimeline,
  }),
  defineRoute({
    method: 'GET',
    path: `${P}/cohorts`,
    summary: 'Cohorts a person belongs to',
    tags: ['persons'],
    scopes: ['person:read', 'cohort:read'],
    personAccess: 'person_cohorts',
    query: cohortsQuery,
    responses: {
      200: {
        description: 'Cohorts',
        schema: record({
          results: {
            type: 'array',
            items: record({ id: { type: 'integer' }, name: nullableString, count: nullableInteger }),
          },
        }),
      },
    },
    csv: CSV,
    handler: personCohorts,
  }),
  ...(['GET', 'POST'] as const).map((method) =>
    defineRoute({
      method,
      path: `${P}/funnel`,
      summary: 'Persons at a funnel step',
      tags: ['persons'],
      scopes: [],
      personAccess: 'person_funnel',
      query: funnelQuery,
      ...(method === 'POST' ? { body: funnelBody } : {}),
      responses: { 200: { description: 'Persons', schema: actorsSchema } },
      csv: ACTORS_CSV,
      handler: funnelPersons,
    }),
  ),
  ...(['GET', 'POST'] as const).map((method) =>
    defineRoute({
      method,
      path: `${P}/funnel/correlation`,
      summary: 'Persons who converted (or not) and performed an event',
      tags: ['persons'],
      scopes: [],
      personAccess: 'person_funnel_correlation',
      query: funnelQuery,
      ...(method === 'POST' ? { body: funnelBody } : {}),
      responses: { 200: { description: 'Persons', schema: actorsSchema } },
      csv: ACTORS_CSV,
      handler: funnelCorrelationPersons,
    }),
  ),
  defineRoute({
    method: 'GET',
    path: `${P}/lifecycle`,
    summary: 'Persons in a lifecycle bucket (new, returning, resurrecting, dormant) on a day',
    tags: ['persons'],
    scopes: [],
    personAccess: 'person_lifecycle',
    query: lifecycleQuery,
    responses: { 200: { description: 'Persons', schema: actorsSchema } },
    csv: ACTORS_CSV,
    handler: lifecyclePersons,
  }),
];
