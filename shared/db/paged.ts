// One page of a list query and its `count`, for every store: the page is read with one row past it
// (so `next` is exact without a count), and the count is skipped when the page already tells it.
import type { EntityManager } from '@mikro-orm/postgresql';
import { type SelectQueryBuilder, sql } from 'kysely';
import { rows } from './sql.ts';

export interface Fragment {
  sql: string;
  params: readonly unknown[];
}

export interface PagedQuery {
  /** The select list, e.g. `p.*`. */
  select: string;
  /** `<table> <alias> where …` with its parameters (no order or limit). */
  from: Fragment;
  /** `order by …`, with a unique tie-break so pages never overlap. */
  order: string;
}

export interface Page {
  limit: number;
  offset: number;
}

export interface PageResult<T> {
  rows: T[];
  hasMore: boolean;
  count: number;
  /** True when `count` is the planner's estimate (only with `exactUpTo`). */
  estimated: boolean;
}

/**
 * A page of `query` and how many rows match. `read` runs the page statement (default rows(); the
 * persons store wraps it to attach distinct ids). With `exactUpTo`, a match the planner expects to be
 * larger is not counted (at a million rows a count costs 100x the page): the estimate is returned,
 * never below the rows known to exist.
 */
export async function pagedQuery<T>(
  em: EntityManager,
  query: PagedQuery,
  page: Page,
  options: { exactUpTo?: number; read?: (sql: string, params: unknown[]) => Promise<T[]> } = {},
): Promise<PageResult<T>> {
  const read = options.read ?? ((sql, params) => rows<T>(em, sql, params));
  const found = await read(`select ${query.select} from ${query.from.sql} ${query.order} limit ? offset ?`, [
    ...query.from.params,
    page.limit + 1,
    page.offset,
  ]);
  const hasMore = found.length > page.limit;
  const results = found.slice(0, page.limit);
  // The last page (or an empty first page) tells the count for free.
  if (!hasMore && (results.length > 0 || page.offset === 0))
    return { rows: results, hasMore, count: page.offset + results.length, estimated: false };
  const known = page.offset + results.length + (hasMore ? 1 : 0);
  const { count, estimated } = await countMatches(em, query.from, options.exactUpTo);
  return { rows: results, hasMore, count: Math.max(count, estimated ? known : 0), estimated };
}

/** How many rows `from` matches: exact, or with `exactUpTo` exact only up to that many, else estimated. */
export async function countMatches(
  em: EntityManager,
  from: Fragment,
  exactUpTo?: number,
): Promise<{ count: number; estimated: boolean }> {
  if (exactUpTo === undefined) {
    const [{ n }] = await rows<{ n: number }>(em, `select count(*)::int as n from ${from.sql}`, from.params);
    return { count: n, estimated: false };
  }
  type Plan = { 'QUERY PLAN'?: { Plan?: { 'Plan Rows'?: number } }[] };
  const [plan] = await rows<Plan>(em, `explain (format json) select 1 from ${from.sql}`, from.params);
  const expected = Math.round(Number(plan['QUERY PLAN']?.[0]?.Plan?.['Plan Rows'] ?? 0));
  if (expected <= exactUpTo) {
    const [{ n }] = await rows<{ n: number }>(
      em,
      `select count(*)::int as n from (select 1 from ${from.sql} limit ?) s`,
      [...from.params, exactUpTo + 1],
    );
    if (n <= exactUpTo) return { count: n, estimated: false };
  }
  return { count: Math.max(expected, exactUpTo + 1), estimated: true };
}

/**
 * pagedQuery for a typed query (db(em)): `query` selects the page's columns in a total order (a unique
 * tie-break last); the count, when the page cannot tell it, runs the same query without them.
 */
export async function pagedSelect<DB, TB extends keyof DB, O>(
  query: SelectQueryBuilder<DB, TB, O>,
  page: Page,
): Promise<PageResult<O>> {
  const found = await query
    .limit(page.limit + 1)
    .offset(page.offset)
    .execute();
  const hasMore = found.length > page.limit;
  const results = found.slice(0, page.limit);
  if (!hasMore && (results.length > 0 || page.offset === 0))
    return { rows: results, hasMore, count: page.offset + results.length, estimated: false };
  const { n } = await query
    .clearSelect()
    .clearOrderBy()
    .select(sql<number>`count(*)::int`.as('n'))
    .$castTo<{ n: number }>()
    .executeTakeFirstOrThrow();
  return { rows: results, hasMore, count: n, estimated: false };
}
