// Persons: every statement the person endpoints run on `person` and `person_distinct_id` (lookups, the
// filtered list and its count, the CSV export's pages and columns, deletion), through the entities'
// Kysely (db(em)). Callers build no SQL; filters arrive as fragments over `person p` (personListFilter,
// property-filters.ts), placed into the typed statements with filterSql().
import { isBigintId } from '../platform/ids.ts';
import type { EntityManager } from '@mikro-orm/postgresql';
import { type Compilable, type Kysely, type Selectable, sql } from 'kysely';
import { randomUUID } from 'node:crypto';
import { cohortFilterResolver } from '../cohorts/index.ts';
import { type DB, db, kyselyOf, prepared } from '../platform/db/kysely.ts';
import { type PageResult, pagedSelect } from '../platform/db/paged.ts';
import { containsPattern, isUuid } from '../platform/db/sql.ts';
import type { EventStore } from '../events/index.ts';
import { personUuidFor } from './person-uuid.ts';
import {
  filterItems,
  filterSql,
  fragmentOf,
  propertyFiltersSql,
  type SqlFragment,
} from '../platform/db/property-filters.ts';
import { dateIndexedKeys } from './property-indexes.ts';

/** A person as the endpoints return it: its columns and its distinct ids, in insertion order. */
export type PersonWithIds = Pick<Selectable<DB['person']>, 'id' | 'uuid' | 'properties' | 'is_identified'> & {
  /** PostgreSQL's text (the pool keeps timestamps as text); a Date where a caller built the person. */
  created_at: Date | string;
  distinct_ids: string[];
};

/** `select p.* from person p`: the persons a statement of this module starts from, narrowed with where(). */
const persons = (em: EntityManager | Kysely<DB>) => kyselyOf(em).selectFrom('person as p').selectAll('p');
type Persons = ReturnType<typeof persons>;

/** The list's order on `p`: newest first with a stable tie-break. */
const newestFirst = (query: Persons): Persons => query.orderBy('p.created_at', 'desc').orderBy('p.id', 'desc');

/**
 * The persons `matching` selects (as `q`), each with its distinct ids (insertion order); `ordered` keeps
 * the list's order (newest first) outside the subquery. array(subquery) rather than
 * coalesce(array_agg(… order by …), '{}'): the same array, about 25 µs less per person in PostgreSQL.
 */
function withDistinctIds(em: EntityManager | Kysely<DB>, matching: Persons, ordered = false) {
  const query = kyselyOf(em)
    .selectFrom(matching.as('q'))
    .select((eb) => [
      'q.id',
      'q.uuid',
      'q.properties',
      'q.is_identified',
      sql<string>`q.created_at`.as('created_at'),
      sql<string[]>`array${eb
        .selectFrom('person_distinct_id as d')
        .select('d.distinct_id')
        .whereRef('d.person_id', '=', 'q.id')
        .orderBy('d.id')}`.as('distinct_ids'),
    ]);
  return ordered ? query.orderBy('q.created_at', 'desc').orderBy('q.id', 'desc') : query;
}

/** The person with this numeric id or uuid in the project, or null. */
export async function findPerson(
  em: EntityManager,
  projectId: number,
  ref: { id: string } | { uuid: string },
): Promise<PersonWithIds | null> {
  const [found] = 'id' in ref ? await personById(em, projectId, ref.id) : await personByUuid(em, projectId, ref.uuid);
  return found ?? null;
}

// GET by id's statement, prepared once (building it took about as long as PostgreSQL took to answer it).
const personById = prepared((kysely: Kysely<DB>, projectId: number, id: string) =>
  withDistinctIds(kysely, persons(kysely).where('p.project_id', '=', projectId).where('p.id', '=', id)),
);
const personByUuid = prepared((kysely: Kysely<DB>, projectId: number, uuid: string) =>
  withDistinctIds(kysely, persons(kysely).where('p.project_id', '=', projectId).where('p.uuid', '=', uuid)),
);

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
  const numericIds = ids.filter((id) => isBigintId(id));
  const uuids = ids.filter(isUuid);
  const matching = persons(em)
    .where('p.project_id', '=', projectId)
    .where('p.id', 'in', (eb) =>
      eb
        .selectFrom('person')
        .select('id')
        .where('project_id', '=', projectId)
        .where((w) =>
          w.or([
            w('id', '=', sql<string>`any(${numericIds}::bigint[])`),
            w('uuid', '=', sql<string>`any(${uuids}::uuid[])`),
          ]),
        )
        .unionAll(
          eb
            .selectFrom('person_distinct_id as d')
            .select('d.person_id as id')
            .where('d.project_id', '=', projectId)
            .where('d.distinct_id', '=', sql<string>`any(${distinctIds}::text[])`),
        ),
    );
  return withDistinctIds(em, matching).execute();
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
  const personIdIn = (ids: Compilable<{ id: string }>): SqlFragment => {
    const inner = fragmentOf(ids);
    return { sql: `p.id in (${inner.sql})`, params: inner.params };
  };
  const distinctIdOwner = (distinctId: string) =>
    db(em)
      .selectFrom('person_distinct_id as d')
      .select('d.person_id as id')
      .where('d.project_id', '=', projectId)
      .where('d.distinct_id', '=', distinctId);
  if (query.distinct_id !== undefined) parts.push(personIdIn(distinctIdOwner(query.distinct_id)));
  if (query.email !== undefined)
    parts.push({ sql: `p.properties @> ?::jsonb`, params: [JSON.stringify({ email: query.email })] });
  const search = query.search?.trim();
  if (search) {
    // One index-friendly branch per way of matching (an OR across them would scan every person).
    const like = containsPattern(search);
    const inProject = db(em).selectFrom('person').select('id').where('project_id', '=', projectId);
    // The expressions of the trigram indexes on email and name (person.ts).
    const property = (key: 'email' | 'name') => sql<string>`(properties->>${sql.lit(key)})`;
    let branches = inProject
      .where(property('email'), 'ilike', like)
      .union(inProject.where(property('name'), 'ilike', like))
      .union(distinctIdOwner(search));
    if (isUuid(search)) branches = branches.union(inProject.where('uuid', '=', search));
    parts.push(personIdIn(branches));
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
 * One page of the list, newest first, read with one person past it (so `next` is exact without a count).
 * `count` is exact when asked (PostHog's `include_total`), on the last page, or up to EXACT_COUNT_LIMIT
 * matches; beyond, the planner's estimate (`estimated`), never below the persons known to exist.
 */
export async function listPersons(
  em: EntityManager,
  filter: SqlFragment,
  page: { limit: number; offset: number },
  includeTotal: boolean,
): Promise<PageResult<PersonWithIds>> {
  return pagedSelect(em, newestFirst(persons(em).where(filterSql(filter))), page, {
    exactUpTo: includeTotal ? undefined : EXACT_COUNT_LIMIT,
    read: (pageQuery) => withDistinctIds(em, pageQuery, true).execute(),
  });
}

/** Deletes the persons (their distinct ids cascade); returns the ids deleted. */
export async function deletePersonRows(em: EntityManager, projectId: number, ids: string[]): Promise<string[]> {
  if (!ids.length) return [];
  const deleted = await db(em)
    .deleteFrom('person')
    .where('project_id', '=', projectId)
    .where('id', 'in', ids)
    .returning('id')
    .execute();
  return deleted.map((d) => d.id);
}

/** jsonb_typeof of a value that holds other values. */
const CONTAINER = ['object', 'array'];

/**
 * Every leaf path of the matching persons' properties (`plan`, `address.city`, `tags.0`), joined with `.`
 * as the CSV flattens them. Top-level keys are typed with `->` (a quarter of jsonb_each's cost at 100,000
 * persons); only the keys that hold an object or a list somewhere are walked.
 */
export async function propertyPaths(em: EntityManager, filter: SqlFragment): Promise<string[]> {
  const keys = await db(em)
    .selectFrom('person as p')
    .crossJoinLateral(sql<{ k: string }>`jsonb_object_keys(p.properties)`.as('k'))
    .select([
      'k.k as key',
      sql<boolean>`bool_or(jsonb_typeof(p.properties -> k.k) not in (${sql.join(CONTAINER)}))`.as('scalar'),
      sql<boolean>`bool_or(jsonb_typeof(p.properties -> k.k) in (${sql.join(CONTAINER)}))`.as('nested'),
    ])
    .where(filterSql(filter))
    .groupBy('k.k')
    .execute();
  const nestedKeys = keys.filter((k) => k.nested).map((k) => k.key);
  const nested = !nestedKeys.length
    ? []
    : await db(em)
        .withRecursive('leaf(path, value)', (qb) =>
          qb
            .selectFrom('person as p')
            .crossJoinLateral(sql<{ k: string }>`unnest(${nestedKeys}::text[])`.as('k'))
            .select([sql<string>`k.k`.as('path'), sql<unknown>`p.properties -> k.k`.as('value')])
            .where(filterSql(filter))
            .where(sql<boolean>`jsonb_typeof(p.properties -> k.k) in (${sql.join(CONTAINER)})`)
            .unionAll((u) =>
              u
                .selectFrom('leaf as l')
                // The object's members, or the list's items numbered from 0.
                .crossJoinLateral(
                  sql<{ key: string; value: unknown }>`(
                    select key, value from jsonb_each(case jsonb_typeof(l.value) when 'object' then l.value else '{}' end)
                    union all
                    select (i - 1)::text, value
                      from jsonb_array_elements(case jsonb_typeof(l.value) when 'array' then l.value else '[]' end)
                      with ordinality a(value, i))`.as('c'),
                )
                .select([sql<string>`l.path || '.' || c.key`.as('path'), 'c.value'])
                .where(sql<boolean>`jsonb_typeof(l.value) in (${sql.join(CONTAINER)})`),
            ),
        )
        .selectFrom('leaf')
        .select('path')
        .distinct()
        .where(sql<boolean>`jsonb_typeof(value) not in (${sql.join(CONTAINER)})`)
        .execute();
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
  const perPerson = db(em)
    .selectFrom('person as p')
    .leftJoin('person_distinct_id as d', 'd.person_id', 'p.id')
    .select((eb) => eb.fn.count<number>('d.id').as('n'))
    .where(filterSql(filter))
    .groupBy('p.id');
  const extent = await db(em)
    .selectFrom(perPerson.as('c'))
    .select((eb) => [eb.fn.countAll<string>().as('persons'), sql<number>`coalesce(max(c.n), 0)::int`.as('max_ids')])
    .executeTakeFirstOrThrow();
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
): Promise<{ persons: (PersonWithIds & { key_at: string })[]; last: ListKey | null }> {
  let matching = persons(em).where(filterSql(filter));
  if (after)
    matching = matching.where(({ eb, refTuple, tuple }) =>
      eb(
        refTuple('p.created_at', 'p.id'),
        '<',
        tuple(sql<Date>`${after.createdAt}::timestamptz`, sql<string>`${after.id}::bigint`),
      ),
    );
  const found = await withDistinctIds(em, newestFirst(matching).limit(limit), true)
    .select(sql<string>`q.created_at::text`.as('key_at'))
    .execute();
  const tail = found.at(-1);
  // The rows keep their key_at: copying a million rows to drop it cost a tenth of the export's CPU.
  return { persons: found, last: tail ? { createdAt: tail.key_at, id: tail.id } : null };
}

/**
 * Moves each distinct id to a new person of its own, under the person's lock: the deterministic
 * uuid of that distinct id, unless a person already holds it (then a random one).
 */
export async function splitDistinctIds(tx: EntityManager, projectId: number, personId: string, distinctIds: string[]) {
  await db(tx).selectFrom('person').select('id').where('id', '=', personId).forUpdate().execute();
  for (const distinctId of distinctIds) {
    const uuid = personUuidFor(projectId, distinctId);
    const created = await db(tx)
      .insertInto('person')
      .values((eb) => ({
        uuid: eb
          .case()
          .when(
            eb.exists(
              eb.selectFrom('person').select('id').where('project_id', '=', projectId).where('uuid', '=', uuid),
            ),
          )
          .then(eb.cast<string>(eb.val(randomUUID()), 'uuid'))
          .else(eb.cast<string>(eb.val(uuid), 'uuid'))
          .end(),
        project_id: projectId,
        properties: sql`'{}'::jsonb`,
        created_at: sql`now()`,
        version: '0',
      }))
      .returning('id')
      .executeTakeFirstOrThrow();
    await db(tx)
      .updateTable('person_distinct_id')
      .set((eb) => ({ person_id: created.id, version: eb('version', '+', '1') }))
      .where('project_id', '=', projectId)
      .where('distinct_id', '=', distinctId)
      .execute();
  }
}

/** The persons of an analytics page, with their distinct ids, newest first (as the page's ids are). */
export function personsByIds(em: EntityManager, projectId: number, ids: string[]): Promise<PersonWithIds[]> {
  if (ids.length === 0) return Promise.resolve([]);
  return withDistinctIds(
    em,
    persons(em).where('p.project_id', '=', projectId).where('p.id', 'in', ids),
    true,
  ).execute();
}
