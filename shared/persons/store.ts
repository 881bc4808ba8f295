// Persons: every statement the person endpoints run on `person` and `person_distinct_id` (lookups, the
// filtered list and its count, the CSV export's pages and columns, deletion). Callers build no SQL;
// filters arrive as fragments over `person p` (personListFilter, property-filters.ts).
import type { EntityManager } from '@mikro-orm/postgresql';
import { randomUUID } from 'node:crypto';
import { cohortFilterResolver } from '../cohorts/membership.ts';
import type { EventStore } from '../events/event-store.ts';
import { pagedQuery, type PageResult } from '../db/paged.ts';
import { containsPattern, isUuid, pgArray, rows, run } from '../db/sql.ts';
import { personUuidFor } from '../ingestion/person-uuid.ts';
import { filterItems, propertyFiltersSql, type SqlFragment } from './property-filters.ts';
import { dateIndexedKeys } from './property-indexes.ts';

export interface PersonWithIds {
  id: string;
  uuid: string;
  properties: Record<string, unknown>;
  is_identified: boolean;
  created_at: Date | string;
  distinct_ids: string[];
}

/** The list's order: newest first with a stable tie-break (`q` is withDistinctIds' outer alias). */
export const NEWEST_FIRST = 'order by q.created_at desc, q.id desc';
const LIST_ORDER = 'order by p.created_at desc, p.id desc';

// array(subquery) rather than coalesce(array_agg(… order by …), '{}'): the same array, about 25 µs less per person in PostgreSQL.
const DISTINCT_IDS = `array(select d.distinct_id from person_distinct_id d where d.person_id = q.id order by d.id)`;

/** Runs a query returning person rows and attaches each person's distinct ids (insertion order). */
export function withDistinctIds(
  em: EntityManager,
  sql: string,
  params: readonly unknown[],
  order = '',
): Promise<PersonWithIds[]> {
  return rows<PersonWithIds>(
    em,
    `select q.id::text as id, q.uuid, q.properties, q.is_identified, q.created_at,
            ${DISTINCT_IDS} as distinct_ids
       from (${sql}) q ${order}`,
    params,
  );
}

/** The person with this numeric id or uuid in the project, or null. */
export async function findPerson(
  em: EntityManager,
  projectId: number,
  ref: { id: string } | { uuid: string },
): Promise<PersonWithIds | null> {
  const [where, value] = 'id' in ref ? ['p.id = ?', ref.id] : ['p.uuid = ?::uuid', ref.uuid];
  const [person] = await withDistinctIds(em, `select p.* from person p where p.project_id = ? and ${where}`, [
    projectId,
    value,
  ]);
  return person ?? null;
}

/**
 * The persons named by numeric id or uuid (`ids`) and those owning `distinctIds`: one indexed branch
 * per way of naming a person (an OR across them would scan the project); `in` counts a person named
 * both ways once. Strings that are neither ids nor uuids name nobody.
 */
export function personsByIdsOrDistinctIds(
  em: EntityManager,
  projectId: number,
  ids: string[],
  distinctIds: string[],
): Promise<PersonWithIds[]> {
  return withDistinctIds(
    em,
    `select p.* from person p where p.project_id = ? and p.id in (
       select id from person where project_id = ? and (id = any(?::bigint[]) or uuid = any(?::uuid[]))
       union all
       select d.person_id from person_distinct_id d where d.project_id = ? and d.distinct_id = any(?::text[]))`,
    [
      projectId,
      projectId,
      pgArray(ids.filter((id) => /^\d{1,18}$/.test(id))),
      pgArray(ids.filter(isUuid)),
      projectId,
      pgArray(distinctIds),
    ],
  );
}

export interface PersonListQuery {
  distinct_id?: string;
  email?: string;
  search?: string;
  /** Parsed property filters (items and AND/OR groups; cohort items resolved here). */
  properties?: unknown;
}

/** The WHERE clause of a person list (alias `p`); throws FilterError for a malformed property filter. */
export async function personListFilter(
  em: EntityManager,
  projectId: number,
  query: PersonListQuery,
  /** Where behavioral cohort filters are evaluated (needed only when the filters have one). */
  events?: EventStore,
): Promise<SqlFragment> {
  const parts: SqlFragment[] = [{ sql: 'p.project_id = ?', params: [projectId] }];
  if (query.distinct_id !== undefined)
    parts.push({
      sql: 'p.id in (select d.person_id from person_distinct_id d where d.project_id = ? and d.distinct_id = ?)',
      params: [projectId, query.distinct_id],
    });
  if (query.email !== undefined)
    parts.push({ sql: `p.properties @> ?::jsonb`, params: [JSON.stringify({ email: query.email })] });
  const search = query.search?.trim();
  if (search) {
    // One index-friendly branch per way of matching (an OR across them would scan every person).
    const like = containsPattern(search);
    const branches = [
      `select id from person where project_id = ? and (properties->>'email') ilike ?`,
      `select id from person where project_id = ? and (properties->>'name') ilike ?`,
      `select person_id from person_distinct_id where project_id = ? and distinct_id = ?`,
    ];
    const params: unknown[] = [projectId, like, projectId, like, projectId, search];
    if (isUuid(search)) {
      branches.push(`select id from person where project_id = ? and uuid = ?::uuid`);
      params.push(projectId, search);
    }
    parts.push({ sql: `p.id in (${branches.join(' union ')})`, params });
  }
  if (query.properties !== undefined) {
    const special = await cohortFilterResolver(em, events, projectId, query.properties);
    // Which keys have a date index is asked only when a date filter is there to use one.
    const dateFilter = filterItems(query.properties).some((item) => String(item.operator).startsWith('is_date_'));
    const dateKeys = dateFilter ? await dateIndexedKeys(em) : new Set<string>();
    parts.push(propertyFiltersSql(query.properties, 'p.properties', special, { dateKeys }));
  }
  return { sql: parts.map((p) => p.sql).join(' and '), params: parts.flatMap((p) => p.params) };
}

/** Up to this many matches the list counts them exactly; a count costs about 2 ms per 10,000 (bench/persons.ts). */
export const EXACT_COUNT_LIMIT = 10_000;

/**
 * One page of the list, newest first. `count` is exact when asked (PostHog's `include_total`), on
 * the last page, or up to EXACT_COUNT_LIMIT matches; beyond, the planner's estimate (`estimated`).
 */
export function listPersons(
  em: EntityManager,
  filter: SqlFragment,
  page: { limit: number; offset: number },
  includeTotal: boolean,
): Promise<PageResult<PersonWithIds>> {
  return pagedQuery(
    em,
    { select: 'p.*', from: { sql: `person p where ${filter.sql}`, params: filter.params }, order: LIST_ORDER },
    page,
    {
      exactUpTo: includeTotal ? undefined : EXACT_COUNT_LIMIT,
      read: (sql, params) => withDistinctIds(em, sql, params, NEWEST_FIRST),
    },
  );
}

/** Deletes the persons (their distinct ids cascade); returns the ids deleted. */
export async function deletePersonRows(em: EntityManager, projectId: number, ids: string[]): Promise<string[]> {
  if (!ids.length) return [];
  const deleted = await rows<{ id: string }>(
    em,
    `delete from person where project_id = ? and id in (?) returning id::text as id`,
    [projectId, ids],
  );
  return deleted.map((d) => d.id);
}

const CONTAINER = `('object', 'array')`;

/**
 * Every leaf path of the matching persons' properties (`plan`, `address.city`, `tags.0`), joined with `.`
 * as the CSV flattens them. Top-level keys are typed with `->` (a quarter of jsonb_each's cost at 100,000
 * persons); only the keys that hold an object or a list somewhere are walked.
 */
export async function propertyPaths(em: EntityManager, filter: SqlFragment): Promise<string[]> {
  const keys = await rows<{ key: string; scalar: boolean; nested: boolean }>(
    em,
    `select k as key, bool_or(jsonb_typeof(p.properties -> k) not in ${CONTAINER}) as scalar,
            bool_or(jsonb_typeof(p.properties -> k) in ${CONTAINER}) as nested
       from person p cross join lateral jsonb_object_keys(p.properties) k where ${filter.sql} group by k`,
    filter.params,
  );
  const nestedKeys = keys.filter((k) => k.nested).map((k) => k.key);
  const nested = !nestedKeys.length
    ? []
    : await rows<{ path: string }>(
        em,
        `with recursive leaf(path, value) as (
           select k, p.properties -> k from person p cross join lateral unnest(?::text[]) k
            where ${filter.sql} and jsonb_typeof(p.properties -> k) in ${CONTAINER}
           union all
           select l.path || '.' || c.key, c.value from leaf l cross join lateral (
             select key, value from jsonb_each(case jsonb_typeof(l.value) when 'object' then l.value else '{}' end)
             union all
             select (i - 1)::text, value
               from jsonb_array_elements(case jsonb_typeof(l.value) when 'array' then l.value else '[]' end)
               with ordinality a(value, i)
           ) c where jsonb_typeof(l.value) in ${CONTAINER})
         select distinct path from leaf where jsonb_typeof(value) not in ${CONTAINER}`,
        [pgArray(nestedKeys), ...filter.params],
      );
  // A key `a.b` and a key `a` holding {b} share one column, as the CSV's flattening merges them.
  return [...new Set([...keys.filter((k) => k.scalar).map((k) => k.key), ...nested.map((n) => n.path)])];
}

/**
 * How many persons match, and the most distinct ids any of them has: the CSV export's row count (said up
 * front) and its `distinct_ids.N` columns, from one scan of the matching persons.
 */
export async function csvExtent(
  em: EntityManager,
  filter: SqlFragment,
): Promise<{ persons: number; maxDistinctIds: number }> {
  const [extent] = await rows<{ persons: string; max_ids: number }>(
    em,
    `select count(*) as persons, coalesce(max(n), 0)::int as max_ids
       from (select count(d.id) as n from person p left join person_distinct_id d on d.person_id = p.id
              where ${filter.sql} group by p.id) c`,
    filter.params,
  );
  return { persons: Number(extent.persons), maxDistinctIds: extent.max_ids };
}

/** Where the CSV export's keyset pager stands: the last row's (created_at, id), created_at as PostgreSQL text. */
export interface ListKey {
  createdAt: string;
  id: string;
}

/**
 * Up to `limit` persons of the list (newest first) after `after`, keyset-paged on (created_at, id): each
 * page costs the same however deep the export is, and a person created meanwhile (newer than the key)
 * cannot push rows into the next page twice. created_at travels as text: a JS Date would drop microseconds.
 */
export async function personsAfter(
  em: EntityManager,
  filter: SqlFragment,
  after: ListKey | null,
  limit: number,
): Promise<{ persons: PersonWithIds[]; last: ListKey | null }> {
  const keyed = after ? ' and (p.created_at, p.id) < (?::timestamptz, ?::bigint)' : '';
  const found = await rows<PersonWithIds & { key_at: string }>(
    em,
    `select q.id::text as id, q.uuid, q.properties, q.is_identified, q.created_at, q.created_at::text as key_at,
            ${DISTINCT_IDS} as distinct_ids
       from (select p.* from person p where ${filter.sql}${keyed} ${LIST_ORDER} limit ?) q ${NEWEST_FIRST}`,
    [...filter.params, ...(after ? [after.createdAt, after.id] : []), limit],
  );
  const tail = found.at(-1);
  // The rows keep their key_at: copying a million rows to drop it cost a tenth of the export's CPU.
  return { persons: found, last: tail ? { createdAt: tail.key_at, id: tail.id } : null };
}

/**
 * Moves each distinct id to a new person of its own, under the person's lock: the deterministic
 * uuid of that distinct id, unless a person already holds it (then a random one).
 */
export async function splitDistinctIds(tx: EntityManager, projectId: number, personId: string, distinctIds: string[]) {
  await rows(tx, `select id from person where id = ? for update`, [personId]);
  for (const distinctId of distinctIds) {
    const uuid = personUuidFor(projectId, distinctId);
    const [created] = await rows<{ id: string }>(
      tx,
      `insert into person (uuid, project_id, properties, created_at, version)
       values (case when exists (select 1 from person where project_id = ? and uuid = ?::uuid) then ?::uuid
                    else ?::uuid end, ?, '{}'::jsonb, now(), 0)
       returning id`,
      [projectId, uuid, randomUUID(), uuid, projectId],
    );
    await run(
      tx,
      `update person_distinct_id set person_id = ?, version = version + 1 where project_id = ? and distinct_id = ?`,
      [created.id, projectId, distinctId],
    );
  }
}

/** The persons of an analytics page, with their distinct ids, newest first (as the page's ids are). */
export function personsByIds(em: EntityManager, projectId: number, ids: string[]): Promise<PersonWithIds[]> {
  if (ids.length === 0) return Promise.resolve([]);
  return withDistinctIds(
    em,
    'select p.* from person p where p.project_id = ? and p.id in (?)',
    [projectId, ids],
    NEWEST_FIRST,
  );
}
