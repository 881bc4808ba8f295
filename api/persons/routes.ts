// Persons: list, retrieve, property changes and deletion. Analysis views are in analysis-routes.ts.
import { ApiError, notFound, validationError } from '../http/errors.ts';
import { PAGE_QUERY_PROPERTIES, pageLinks, pageOf, paginated, paginatedSchema } from '../http/pagination.ts';
import type { Actor } from '../../shared/platform/activity-log.ts';
import { actorOf, defineRoute } from '../http/routes.ts';
import { rejectUnstorableValues } from '../http/json.ts';
import { personsRead, recordPersonsReadNow } from '../http/access-log.ts';
import { csvOfAnswer, FORMAT_QUERY as FORMAT, personsCsv, personsToCsv } from './csv.ts';
import { findPerson, PERSON_ID, personListFilter } from './queries.ts';
import { personListRow, personListRowSchema, personRecord, personRecordSchema } from './serializers.ts';
import type { PersonWithIds } from './serializers.ts';
import type { EntityManager } from '@mikro-orm/postgresql';
import { anyJson, record } from '../http/schemas.ts';
import { EXACT_COUNT_LIMIT, listPersons, personsByIdsOrDistinctIds } from '../../shared/persons/index.ts';
import { changePersonProperties } from '../../shared/persons/index.ts';
import {
  answerDeletionRequest,
  deletionQuery,
  DELETION_REQUEST_ID,
  deletionRequestSchema,
  deletionWork,
  dryRunSchema,
} from './deletion-requests.ts';
import { listDeletionRequests, retryDeletion } from '../../shared/deletions/index.ts';

const P = '/api/projects/:project_id/persons';
// The JSON answer as one CSV row per object (a person, a deletion result).
const CSV = csvOfAnswer();
const BOOLEAN_PARAM = { type: 'boolean', default: false } as const;

const UNSET_KEY = { type: 'string', minLength: 1, maxLength: 400 } as const;

/**
 * A query parameter holding any value: its JSON value when it is valid JSON, else the string itself.
 * An integer beyond 2^53 or a number beyond a double's range stays a string (as a number it would silently change).
 */
function queryValue(raw: string, attr: string): unknown {
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch {
    return raw;
  }
  if (typeof parsed === 'number') {
    const lossyInteger = !Number.isSafeInteger(parsed) && /^\s*-?\d+\s*$/.test(raw);
    if (!Number.isFinite(parsed) || lossyInteger) return raw;
  }
  // JSON escapes (\u0000, \ud800) can make characters that the raw query could not carry.
  rejectUnstorableValues(parsed, [attr]);
  return parsed;
}

/** PostHog builds these 400s by hand with code and detail swapped; clients compare them literally. */
const swappedRequired = (attr: string) =>
  new ApiError(400, 'validation_error', 'This field is required.', 'required', attr);

/** A person after a change; 404 when it was deleted meanwhile. */
function changed(person: PersonWithIds | null): PersonWithIds {
  if (!person) throw notFound();
  return person;
}

/** PATCH and update_property: the same as capturing a `$set` event, applied at once. */
async function setPersonProperties(
  em: EntityManager,
  actor: Actor,
  person: PersonWithIds,
  set: Record<string, unknown>,
): Promise<PersonWithIds> {
  return changed(
    await changePersonProperties(
      em,
      actor,
      person,
      { set },
      { name: '$set', properties: { $set: set } },
      {
        name: 'updated',
        itemName: null,
        changes: [{ type: 'Person', action: 'changed', field: 'properties', before: null, after: null }],
      },
    ),
  );
}

export const personRoutes = [
  defineRoute({
    method: 'GET',
    path: P,
    summary: 'List persons (filters: distinct_id, email, search, properties); format=csv exports',
    tags: ['persons'],
    scopes: ['person:read'],
    // format=csv: recorded as person_list_csv, page by page as the export streams.
    personAccess: 'person_list',
    query: {
      type: 'object',
      properties: {
        ...PAGE_QUERY_PROPERTIES,
        ...FORMAT,
        distinct_id: { type: 'string', maxLength: 400, description: 'Persons owning this distinct id' },
        email: { type: 'string', maxLength: 1000, description: 'Exact match on the email property' },
        search: {
          type: 'string',
          maxLength: 1000,
          description: 'Email or name substring, person uuid, or exact distinct id',
        },
        properties: { type: 'string', maxLength: 100_000, description: 'JSON array of property filters' },
        include_total: {
          type: 'string',
          description: 'Present: `count` is exact however many persons match (costs a full count)',
        },
      },
    },
    responses: {
      200: {
        description:
          `A page of persons. \`count\` is exact up to ${EXACT_COUNT_LIMIT} matches and on the last page; beyond, ` +
          "PostgreSQL's estimate, never below the persons known to exist (header X-Count-Estimated: true). " +
          '`next` is always exact. With `format=csv`: every matching person (or the first `limit`), streamed, ' +
          'with the number of rows in header X-Total-Count.',
        schema: paginatedSchema(personListRowSchema),
      },
    },
    handler: async (ctx) => {
      const filter = await personListFilter(ctx.state.em, ctx.state.project.id, ctx.state.query, ctx.deps.events);
      if (ctx.state.query.format === 'csv') {
        ctx.type = 'text/csv';
        ctx.set('Content-Disposition', 'attachment; filename="persons.csv"');
        const limit = ctx.state.query.limit ? Number(ctx.state.query.limit) : undefined;
        // Streamed: each page of rows is recorded (one row per page, the request's id on each) before it is sent.
        const onPage = (persons: PersonWithIds[], page: number) =>
          recordPersonsReadNow(ctx, 'person_list_csv', {
            personUuids: persons.map((p) => p.uuid),
            details: { format: 'csv', page },
          });
        const { rows, stream } = await personsCsv(ctx.state.em, filter, { limit, onPage });
        ctx.set('X-Total-Count', String(rows));
        ctx.body = stream;
        return;
      }
      const page = pageOf(ctx.state.query);
      const exact = ctx.state.query.include_total !== undefined;
      const { rows, hasMore, count, estimated } = await listPersons(ctx.state.em, filter, page, exact);
      if (estimated) ctx.set('X-Count-Estimated', 'true');
      personsRead(
        ctx,
        rows.map((p) => p.uuid),
      );
      ctx.body = { count, ...pageLinks(ctx, page, hasMore), results: rows.map(personListRow) };
    },
  }),
  defineRoute({
    method: 'POST',
    path: P,
    summary: 'Not allowed: persons are created by ingestion',
    tags: ['persons'],
    scopes: ['person:write'],
    responses: { 405: { description: 'Creating persons via this API is not allowed' } },
    handler: () => {
      throw new ApiError(
        405,
        'invalid_request',
        'method_not_allowed',
        'Creating persons via this API is not allowed. Please create persons by sending an $identify event. See https://posthog.com/docs/product-analytics/identify for details.',
      );
    },
  }),
  defineRoute({
    method: 'GET',
    path: `${P}/:id`,
    params: PERSON_ID,
    summary: 'Retrieve a person by numeric id or uuid',
    tags: ['persons'],
    scopes: ['person:read'],
    personAccess: 'person_retrieve',
    query: { type: 'object', properties: FORMAT },
    responses: {
      200: { description: 'The person', schema: personRecordSchema },
      400: { description: 'Not a person id' },
      404: { description: 'Not found' },
    },
    handler: async (ctx) => {
      const person = await findPerson(ctx.state.em, ctx.state.project.id, ctx.state.params.id);
      if (ctx.state.query.format === 'csv') {
        ctx.type = 'text/csv';
        ctx.body = personsToCsv([person]);
        personsRead(ctx, [person.uuid], { format: 'csv' });
        return;
      }
      personsRead(ctx, [person.uuid]);
      ctx.body = personRecord(person);
    },
  }),
  // PostHog's update serves PUT and PATCH alike: only `properties`, merged as a $set event.
  ...(['PATCH', 'PUT'] as const).map((method) =>
    defineRoute({
      method,
      path: `${P}/:id`,
      params: PERSON_ID,
      summary: 'Update person properties (acts like capturing a $set event; PUT and PATCH alike)',
      tags: ['persons'],
      scopes: ['person:write'],
      query: { type: 'object', properties: FORMAT },
      body: { type: 'object', properties: { properties: {} } },
      requiredByHandler: ['properties'],
      responses: { 200: { description: 'The updated person', schema: personRecordSchema } },
      csv: CSV,
      handler: async (ctx) => {
        const person = await findPerson(ctx.state.em, ctx.state.project.id, ctx.state.params.id);
        const properties = ctx.state.body.properties;
        if (properties === undefined || properties === null) throw swappedRequired('properties');
        if (typeof properties !== 'object' || Array.isArray(properties))
          throw validationError('Expected a dictionary of items.', 'properties');
        const set = properties as Record<string, unknown>;
        ctx.body = personRecord(await setPersonProperties(ctx.state.em, actorOf(ctx), person, set));
      },
    }),
  ),
  defineRoute({
    method: 'POST',
    path: `${P}/:id/update_property`,
    params: PERSON_ID,
    summary: 'Set one property (acts like capturing a $set event); key and value in the query or the body',
    tags: ['persons'],
    scopes: ['person:write'],
    query: {
      type: 'object',
      properties: {
        ...FORMAT,
        key: { type: 'string', description: 'The property key (a body `key` wins)' },
        value: {
          type: 'string',
          description: 'The new value: parsed as JSON when it is valid JSON, else the string (a body `value` wins)',
        },
      },
    },
    body: { type: 'object', properties: { key: {}, value: {} } },
    responses: { 200: { description: 'The updated person', schema: personRecordSchema } },
    csv: CSV,
    handler: async (ctx) => {
      const person = await findPerson(ctx.state.em, ctx.state.project.id, ctx.state.params.id);
      const body = ctx.state.body as { key?: unknown; value?: unknown };
      const query = ctx.state.query as { key?: string; value?: string };
      let value: unknown;
      if (Object.hasOwn(body, 'value')) value = body.value;
      else if (query.value !== undefined) value = queryValue(query.value, 'value');
      else throw swappedRequired('value');
      const key = body.key ?? query.key;
      if (key === undefined || key === null) throw swappedRequired('key');
      if (typeof key !== 'string' || key === '' || key.length > 400) {
        throw validationError('Not a valid string.', 'key');
      }
      ctx.body = personRecord(await setPersonProperties(ctx.state.em, actorOf(ctx), person, { [key]: value }));
    },
  }),
  defineRoute({
    method: 'POST',
    path: `${P}/:id/delete_property`,
    params: PERSON_ID,
    summary: 'Remove one property (acts like capturing $delete_person_property); $unset in the query or the body',
    tags: ['persons'],
    scopes: ['person:write'],
    query: {
      type: 'object',
      properties: {
        ...FORMAT,
        $unset: { ...UNSET_KEY, description: 'The property key to remove (a body `$unset` wins)' },
      },
    },
    body: { type: 'object', properties: { $unset: UNSET_KEY } },
    responses: {
      200: {
        description: 'The updated person',
        schema: record({ success: { const: true }, ...personRecordSchema.properties }),
      },
    },
    csv: CSV,
    handler: async (ctx) => {
      const person = await findPerson(ctx.state.em, ctx.state.project.id, ctx.state.params.id);
      const key = (ctx.state.body.$unset ?? ctx.state.query.$unset) as string | undefined;
      if (key === undefined) throw validationError('This field is required.', '$unset', 'required');
      const updated = changed(
        await changePersonProperties(
          ctx.state.em,
          actorOf(ctx),
          person,
          { unset: [key] },
          { name: '$delete_person_property', properties: { $unset: [key] } },
          {
            name: 'delete_property',
            itemName: person.uuid,
            changes: [{ type: 'Person', action: 'changed', field: null, before: null, after: null }],
          },
        ),
      );
      ctx.body = { success: true, ...personRecord(updated) };
    },
  }),
];

const bulkDeleteResultSchema = {
  type: 'object',
  required: [
    'persons_found',
    'persons_deleted',
    'events_queued_for_deletion',
    'recordings_queued_for_deletion',
    'deletion_errors',
    'deletion_requests',
  ],
  properties: {
    persons_found: { type: 'integer' },
    persons_deleted: { type: 'integer' },
    events_queued_for_deletion: { type: 'boolean' },
    recordings_queued_for_deletion: { type: 'boolean' },
    deletion_errors: { type: 'array', items: anyJson() },
    deletion_requests: { type: 'array', items: deletionRequestSchema },
  },
};

/** `ids`/`distinct_ids` from the body, or from the query as a JSON array or comma-separated list. */
function idList(fromBody: unknown, fromQuery: string | undefined, name: 'ids' | 'distinct_ids'): unknown[] | undefined {
  if (fromBody !== undefined && fromBody !== null) {
    if (!Array.isArray(fromBody))
      throw validationError(`Expected a list of items but got type "${typeof fromBody}".`, name, 'not_a_list');
    return fromBody;
  }
  if (typeof fromQuery !== 'string' || fromQuery === '') return undefined;
  try {
    const parsed: unknown = JSON.parse(fromQuery);
    if (Array.isArray(parsed)) return parsed;
  } catch {
    // not JSON: a comma-separated list
  }
  return fromQuery.split(',');
}

/** A boolean option of bulk_delete: the body's, else the query's (both validated booleans). */
const flag = (fromBody: boolean | undefined, fromQuery: boolean | undefined) => (fromBody ?? fromQuery) === true;

/** POST /persons/:id/<action>: records a deletion request for the person, who stays. */
function deletionRequestRoute(
  action: string,
  summary: string,
  what: { deleteEvents: boolean; deleteRecordings: boolean },
) {
  return defineRoute({
    method: 'POST',
    path: `${P}/:id/${action}`,
    params: PERSON_ID,
    summary,
    tags: ['persons'],
    scopes: ['person:write'],
    destructive: true,
    query: deletionQuery(FORMAT),
    headers: deletionWork.headers,
    csv: CSV,
    responses: {
      ...deletionWork.responses,
      200: {
        description: 'The deletion request (with dry_run=true: what it would delete)',
        schema: {
          anyOf: [record({ deletion_requests: { type: 'array', items: deletionRequestSchema } }), dryRunSchema],
        },
      },
    },
    handler: (ctx) =>
      answerDeletionRequest(
        ctx,
        action,
        {
          ...what,
          keepPerson: true,
          eventsMode: 'off_peak',
          suppress: ctx.state.query.suppress === true,
          dryRun: ctx.state.query.dry_run === true,
        },
        async (em) => [await findPerson(em, ctx.state.project.id, ctx.state.params.id)],
        (_persons, { requests }) => ({ status: 200, body: { deletion_requests: requests } }),
      ),
  });
}

export const personDeletionRoutes = [
  defineRoute({
    method: 'DELETE',
    path: `${P}/:id`,
    params: PERSON_ID,
    summary: 'Delete a person; delete_events=true also queues deletion of its events (weekly batch, Sunday 05:00 UTC)',
    tags: ['persons'],
    scopes: ['person:write'],
    // format is accepted as on every person endpoint; a 204 has no data to render.
    query: deletionQuery({
      ...FORMAT,
      delete_events: BOOLEAN_PARAM,
      delete_recordings: BOOLEAN_PARAM,
      keep_person: BOOLEAN_PARAM,
    }),
    headers: deletionWork.headers,
    responses: {
      ...deletionWork.responses,
      200: { description: 'dry_run=true: what it would delete', schema: dryRunSchema },
      204: { description: 'Deleted' },
      404: { description: 'Not found' },
    },
    handler: (ctx) => {
      const q = ctx.state.query;
      const options = {
        deleteEvents: q.delete_events === true,
        deleteRecordings: q.delete_recordings === true,
        keepPerson: q.keep_person === true,
        eventsMode: 'weekly' as const,
        suppress: q.suppress === true,
        dryRun: q.dry_run === true,
      };
      return answerDeletionRequest(
        ctx,
        'delete',
        options,
        async (em) => [await findPerson(em, ctx.state.project.id, ctx.state.params.id)],
        () => ({ status: 204, body: null }),
      );
    },
  }),
  deletionRequestRoute('delete_events', 'Queue deletion of all events of this person (runs in the off-peak window)', {
    deleteEvents: true,
    deleteRecordings: false,
  }),
  deletionRequestRoute('delete_recordings', 'Queue deletion of all recordings of this person (as soon as possible)', {
    deleteEvents: false,
    deleteRecordings: true,
  }),
  defineRoute({
    method: 'POST',
    path: `${P}/bulk_delete`,
    summary: 'Delete the persons named by ids (uuid or numeric) and those owning distinct_ids (up to 1000 each)',
    tags: ['persons'],
    scopes: ['person:write'],
    destructive: true,
    query: deletionQuery({
      ...FORMAT,
      delete_events: { type: 'boolean' },
      delete_recordings: { type: 'boolean' },
      keep_person: { type: 'boolean' },
      ids: { type: 'string', description: 'JSON array or comma-separated list (the body is preferred)' },
      distinct_ids: { type: 'string', description: 'JSON array or comma-separated list (the body is preferred)' },
    }),
    body: {
      type: 'object',
      properties: {
        ids: { type: 'array', items: { type: ['string', 'integer'], format: 'int64', maxLength: 100 } },
        distinct_ids: { type: 'array', items: { type: ['string', 'integer'], format: 'int64', maxLength: 400 } },
        delete_events: { type: 'boolean' },
        delete_recordings: { type: 'boolean' },
        keep_person: { type: 'boolean' },
        suppress: { type: 'boolean' },
        dry_run: { type: 'boolean' },
      },
    },
    headers: deletionWork.headers,
    responses: {
      ...deletionWork.responses,
      200: {
        description: 'What was found, deleted and queued (with dry_run=true: what would be)',
        schema: { anyOf: [bulkDeleteResultSchema, dryRunSchema] },
      },
    },
    csv: CSV,
    handler: async (ctx) => {
      const { body, query } = ctx.state;
      const ids = idList(body.ids, query.ids, 'ids')?.map(String) ?? [];
      const distinctIds = idList(body.distinct_ids, query.distinct_ids, 'distinct_ids')?.map(String) ?? [];
      if (distinctIds.length > 1000) throw validationError('You can only pass 1000 distinct_ids in one call');
      if (ids.length > 1000) throw validationError('You can only pass 1000 ids in one call');
      if (!ids.length && !distinctIds.length) throw validationError('You need to specify either distinct_ids or ids');
      const options = {
        deleteEvents: flag(body.delete_events, query.delete_events),
        deleteRecordings: flag(body.delete_recordings, query.delete_recordings),
        keepPerson: flag(body.keep_person, query.keep_person),
        eventsMode: 'weekly' as const,
        suppress: flag(body.suppress, query.suppress),
        dryRun: flag(body.dry_run, query.dry_run),
      };
      await answerDeletionRequest(
        ctx,
        'bulk_delete',
        options,
        // Seed rule 1: the union of both lists, a person named both ways counted once.
        (em) => personsByIdsOrDistinctIds(em, ctx.state.project.id, ids, distinctIds),
        (persons, { personsDeleted, requests }) => ({
          status: 200,
          body: {
            persons_found: persons.length,
            persons_deleted: personsDeleted,
            events_queued_for_deletion: options.deleteEvents && persons.length > 0,
            recordings_queued_for_deletion: options.deleteRecordings && persons.length > 0,
            deletion_errors: [],
            deletion_requests: requests,
          },
        }),
      );
    },
  }),
  defineRoute({
    method: 'GET',
    path: `${P}/deletion_status`,
    summary: 'Deletion requests of this project with their status',
    tags: ['persons'],
    scopes: ['person:read'],
    query: {
      type: 'object',
      properties: {
        ...PAGE_QUERY_PROPERTIES,
        status: { enum: ['pending', 'running', 'completed', 'failed', 'cancelled', 'all'], default: 'all' },
        person_uuid: { type: 'string', format: 'uuid' },
      },
    },
    responses: { 200: { description: 'A page of deletion requests', schema: paginatedSchema(deletionRequestSchema) } },
    handler: async (ctx) => {
      const { status, person_uuid } = ctx.state.query;
      const page = pageOf(ctx.state.query);
      const filter = { projectId: ctx.state.project.id, status, personUuid: person_uuid };
      const { count, results } = await listDeletionRequests(ctx.state.em, filter, page);
      ctx.body = paginated(ctx, page, count, results);
    },
  }),
  defineRoute({
    method: 'POST',
    path: `${P}/deletion_status/:id/retry`,
    params: { id: DELETION_REQUEST_ID },
    summary:
      'Retry a failed deletion request now (failed requests are also retried automatically, with a growing delay)',
    tags: ['persons'],
    scopes: ['person:write'],
    responses: { 200: { description: 'The request, due at once', schema: deletionRequestSchema } },
    handler: async (ctx) => {
      const id = ctx.state.params.id;
      // If Redis is away the request is still due: the worker's reconciler gives it a job.
      const result = await retryDeletion(ctx.state.em, ctx.state.project.id, id, ctx.deps.queues.deletions);
      if (result === 'not_found') throw notFound();
      if (result === 'not_failed')
        throw validationError(`Deletion request ${id} has not failed; only a failed request can be retried.`, 'id');
      ctx.body = result.request;
    },
  }),
];
