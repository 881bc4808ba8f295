// The read-access log (shared/access-log): who read a person's data, when, how and from where. Reading
// the log is itself recorded (`access_log_read`), naming the persons whose reads the answer shows: the
// person asked about, or every person named on the page of an unfiltered listing.
import type { AccessRecord } from '../../shared/access-log/index.ts';
import { listPersonAccess } from '../../shared/access-log/index.ts';
import { accessRecorderOf, personsRead } from '../http/access-log.ts';
import { validationError } from '../http/errors.ts';
import { PAGE_QUERY_PROPERTIES, pageLinks, pageOf, paginatedSchema } from '../http/pagination.ts';
import { defineRoute, type RouteContext } from '../http/routes.ts';
import { dateTime, nullableInteger, nullableString, openObject, record } from '../http/schemas.ts';
import { csvOfAnswer, FORMAT_QUERY as FORMAT } from './csv.ts';
import { findPerson, PERSON_ID } from './queries.ts';
import { BIGINT_ID_PATTERN } from '../../shared/platform/ids.ts';

const P = '/api/projects/:project_id/persons';
/** The largest page (a CSV export pages through `next`, sent in its Link header). */
const MAX_PAGE = 1000;

const SINCE = {
  type: 'string',
  format: 'date-time',
  description: 'Only reads at or after this time (ISO 8601 with a time zone)',
} as const;

// Reading the log adds to it (and reads go on meanwhile): `next` and `previous` hold the newest row the
// first page saw, so paging on neither repeats nor skips a row.
const THROUGH_ID = {
  type: 'string',
  pattern: BIGINT_ID_PATTERN,
  description: 'Only rows up to this id (set in `next`/`previous`: the pages list what the first page saw)',
} as const;

const accessRecordSchema = record({
  id: { type: 'string', description: 'The row id (a 64-bit integer, as a string)' },
  timestamp: { ...dateTime, description: 'When the answer was computed' },
  user_id: { ...nullableInteger, description: 'The user who read (null once that user is deleted)' },
  api_key_id: { ...nullableString, description: 'The personal API key the read was made with' },
  action: {
    type: 'string',
    description: 'What was read: person_retrieve, person_list, person_list_csv, person_activity, … access_log_read',
  },
  person_uuids: {
    type: 'array',
    items: { type: 'string', format: 'uuid' },
    description: 'The persons whose data the answer held',
  },
  request_id: { ...nullableString, description: 'The request’s X-Request-Id' },
  client_address: {
    ...nullableString,
    description: 'The client’s address as the throttles see it (TRUST_PROXY hops into X-Forwarded-For)',
  },
  details: openObject('What else identifies the read: format=csv, the page of a CSV export'),
});

const listQuery = {
  type: 'object',
  properties: {
    ...PAGE_QUERY_PROPERTIES,
    ...FORMAT,
    person_uuid: { type: 'string', format: 'uuid', description: 'Only reads of this person' },
    since: SINCE,
    through_id: THROUGH_ID,
  },
} as const;
const personQuery = {
  type: 'object',
  properties: { ...PAGE_QUERY_PROPERTIES, ...FORMAT, since: SINCE, through_id: THROUGH_ID },
} as const;

// CSV: one row per read, the persons' uuids space-separated in one cell.
const ACCESS_CSV = csvOfAnswer((answer: { results: AccessRecord[] }) =>
  answer.results.map((r) => ({ ...r, person_uuids: r.person_uuids.join(' ') })),
);

const responses = {
  200: {
    description:
      'A page of reads, newest first (`next`/`previous`, no `count`: a project’s log grows by every read). ' +
      'With `format=csv`: the page as CSV, the next page’s URL in the Link header.',
    schema: paginatedSchema(accessRecordSchema, { countOptional: true }),
  },
};

/** A page of the log (one more row read than shown, to know whether there is a next page). */
async function accessPage(
  ctx: RouteContext<typeof listQuery> | RouteContext<typeof personQuery>,
  personUuid: string | undefined,
) {
  const { since } = ctx.state.query;
  const from = since === undefined ? undefined : new Date(since);
  if (from && Number.isNaN(from.getTime())) throw validationError('Enter a valid date/time.', 'since');
  // This process's reads so far are in the answer (other processes' are written within 100 ms).
  await accessRecorderOf(ctx.deps.orm).drain();
  const page = pageOf(ctx.state.query, 100, MAX_PAGE);
  const throughId = ctx.state.query.through_id;
  const found = await listPersonAccess(ctx.state.em, {
    projectId: ctx.state.project.id,
    personUuid,
    since: from,
    throughId,
    limit: page.limit + 1,
    offset: page.offset,
  });
  const results = found.slice(0, page.limit);
  personsRead(ctx, personUuid ? [personUuid] : results.flatMap((r) => r.person_uuids));
  const links = pageLinks(ctx, page, found.length > page.limit);
  // The first page pins the newest row it saw (ids grow with every row) for the pages after it.
  const pinned = throughId ?? (page.offset === 0 ? results[0]?.id : undefined);
  const pin = (url: string | null) => {
    if (url === null || pinned === undefined) return url;
    const withPin = new URL(url);
    withPin.searchParams.set('through_id', pinned);
    withPin.searchParams.sort();
    return withPin.toString();
  };
  ctx.body = { next: pin(links.next), previous: pin(links.previous), results };
}

export const accessLogRoutes = [
  defineRoute({
    method: 'GET',
    path: `${P}/access_log`,
    summary: 'Who read persons’ data through the API: the project’s read-access log, newest first',
    tags: ['persons'],
    scopes: ['person:read'],
    personAccess: 'access_log_read',
    query: listQuery,
    responses,
    csv: ACCESS_CSV,
    handler: (ctx) => accessPage(ctx, ctx.state.query.person_uuid?.toLowerCase()),
  }),
  defineRoute({
    method: 'GET',
    path: `${P}/:id/access_log`,
    params: PERSON_ID,
    summary: 'Who read this person’s data through the API, newest first',
    tags: ['persons'],
    scopes: ['person:read'],
    personAccess: 'access_log_read',
    query: personQuery,
    responses: { ...responses, 404: { description: 'Not found' } },
    csv: ACCESS_CSV,
    handler: async (ctx) =>
      accessPage(ctx, (await findPerson(ctx.state.em, ctx.state.project.id, ctx.state.params.id)).uuid),
  }),
];
