// Reading persons: lookup by id or uuid, and the filtered list shared by JSON, CSV and the
// analysis endpoints (funnel, lifecycle) that return persons.
import type { EntityManager } from '@mikro-orm/postgresql';
import { containsPattern, isUuid } from '../../shared/db/sql.ts';
import { cohortFilterResolver } from '../../shared/cohorts/membership.ts';
import { FilterError, propertyFiltersSql, type SqlFragment } from '../../shared/persons/property-filters.ts';
import { notFound, validationError } from '../http/errors.ts';
import type { PersonWithIds } from './serializers.ts';

/** The person `:id` names (numeric id or uuid) in the project; 400 for anything else, 404 if absent. */
export async function findPerson(em: EntityManager, projectId: number, idParam: string): Promise<PersonWithIds> {
  let where: string;
  if (/^\d{1,18}$/.test(idParam)) where = 'p.id = ?';
  else if (isUuid(idParam)) where = 'p.uuid = ?::uuid';
  else
    throw validationError(
      'The ID provided does not look like a personID. If you are using a distinctId, please use /persons?distinct_id=<id> instead.',
    );
  const [person] = await withDistinctIds(em, `select p.* from person p where p.project_id = ? and ${where}`, [
    projectId,
    idParam,
  ]);
  if (!person) throw notFound();
  return person;
}

/** Runs a query returning person rows and attaches each person's distinct ids (insertion order). */
export async function withDistinctIds(
  em: EntityManager,
  sql: string,
  params: unknown[],
  order = '',
): Promise<PersonWithIds[]> {
  return em.getConnection().execute<PersonWithIds[]>(
    `select q.id::text as id, q.uuid, q.properties, q.is_identified, q.created_at,
            coalesce((select array_agg(d.distinct_id order by d.id) from person_distinct_id d where d.person_id = q.id), '{}') as distinct_ids
       from (${sql}) q ${order}`,
    params,
  );
}

export const NEWEST_FIRST = 'order by q.created_at desc, q.id desc';

export interface PersonListQuery {
  distinct_id?: string;
  email?: string;
  search?: string;
  properties?: string;
}

/** The WHERE clause of a person list (alias `p`), from the list's query parameters. */
export async function personListFilter(
  em: EntityManager,
  projectId: number,
  query: PersonListQuery,
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
  if (query.properties !== undefined && query.properties !== '') {
    let filters: unknown;
    try {
      filters = JSON.parse(query.properties);
    } catch {
      throw validationError('Properties filter must be a JSON array of property filters.', 'properties');
    }
    try {
      const special = await cohortFilterResolver(em, projectId, filters);
      parts.push(propertyFiltersSql(filters, 'p.properties', special));
    } catch (error) {
      if (error instanceof FilterError) throw validationError(error.message, 'properties');
      throw error;
    }
  }
  return { sql: parts.map((p) => p.sql).join(' and '), params: parts.flatMap((p) => p.params) };
}

/**
 * One page of the list, newest first with a stable tie-break. One row past the page tells whether
 * there is a next page; the total is counted only when asked for (PostHog's `include_total`),
 * since counting a large match costs far more than the page itself.
 */
export async function listPersons(
  em: EntityManager,
  filter: SqlFragment,
  limit: number,
  offset: number,
  includeTotal: boolean,
) {
  const rows = await withDistinctIds(
    em,
    `select p.* from person p where ${filter.sql} order by p.created_at desc, p.id desc limit ? offset ?`,
    [...filter.params, limit + 1, offset],
    NEWEST_FIRST,
  );
  const hasMore = rows.length > limit;
  let count: number | null = null;
  if (includeTotal)
    [{ count }] = await em
      .getConnection()
      .execute<{ count: number }[]>(`select count(*)::int as count from person p where ${filter.sql}`, filter.params);
  return { rows: rows.slice(0, limit), hasMore, count };
}
