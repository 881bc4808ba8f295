// One page of a list query and its `count`, for every store: the page is read with one row past it
// (so `next` is exact without a count), and the count is skipped when the page already tells it.
import type { EntityManager } from '@mikro-orm/postgresql';
import { sql, type SelectQueryBuilder } from 'kysely';
import { db, type DB } from './kysely.ts';
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
  return pageOf(found, page, () => countMatches(em, query.from, options.exactUpTo));
}

/**
 * pagedQuery() for a typed query (db(em), ordered with a unique tie-break): the page of `query` and how
 * many rows it matches, counted as pagedQuery() counts them.
 */
export async function pagedSelect<QDB extends DB, TB extends keyof QDB, O>(
  em: EntityManager,
  query: SelectQueryBuilder<QDB, TB, O>,
  page: Page,
  options: { exactUpTo?: number } = {},
): Promise<PageResult<O>> {
  const found = await query
    .limit(page.limit + 1)
    .offset(page.offset)
    .execute();
  const matches = query.clearSelect().clearOrderBy().select(sql.lit(1).as('one'));
  const count = (limit?: number) =>
    db(em)
      .selectFrom(limit === undefined ? matches.as('matched') : matches.limit(limit).as('matched'))
      .select((eb) => eb.cast<number>(eb.fn.countAll(), 'integer').as('n'))
      .executeTakeFirstOrThrow()
      .then((row) => row.n);
  const plannedRows = async () => {
    const [plan] = await matches.explain<Plan>('json');
    return plan;
  };
  return pageOf(found, page, () => counted(count, plannedRows, options.exactUpTo));
}

type Plan = { 'QUERY PLAN'?: { Plan?: { 'Plan Rows'?: number } }[] };

/** The page of `found` (read one row past it), counting the matches only when the page does not tell. */
async function pageOf<T>(
  found: T[],
  page: Page,
  countAll: () => Promise<{ count: number; estimated: boolean }>,
): Promise<PageResult<T>> {
  const hasMore = found.length > page.limit;
  const results = found.slice(0, page.limit);
  // The last page (or an empty first page) tells the count for free.
  if (!hasMore && (results.length > 0 || page.offset === 0))
    return { rows: results, hasMore, count: page.offset + results.length, estimated: false };
  const known = page.offset + results.length + (hasMore ? 1 : 0);
  const { count, estimated } = await countAll();
  return { rows: results, hasMore, count: Math.max(count, estimated ? known : 0), estimated };
}

/** How many rows `from` matches: exact, or with `exactUpTo` exact only up to that many, else estimated. */
export function countMatches(
  em: EntityManager,
  from: Fragment,
  exactUpTo?: number,
): Promise<{ count: number; estimated: boolean }> {
  const count = async (limit?: number) => {
    const [{ n }] =
      limit === undefined
        ? await rows<{ n: number }>(em, `select count(*)::int as n from ${from.sql}`, from.params)
        : await rows<{ n: number }>(em, `select count(*)::int as n from (select 1 from ${from.sql} limit ?) s`, [
            ...from.params,
            limit,
          ]);
    return n;
  };
  const plannedRows = async () => {
    const [plan] = await rows<Plan>(em, `explain (format json) select 1 from ${from.sql}`, from.params);
    return plan;
  };
  return counted(count, plannedRows, exactUpTo);
}

/**
 * The count of a match, from `count` (of at most `limit` rows when given) and the planner's `plan`: exact,
 * or with `exactUpTo` exact only up to that many, else the planner's estimate.
 */
async function counted(
  count: (limit?: number) => Promise<number>,
  plan: () => Promise<Plan>,
  exactUpTo?: number,
): Promise<{ count: number; estimated: boolean }> {
  if (exactUpTo === undefined) return { count: await count(), estimated: false };
  const expected = Math.round(Number((await plan())['QUERY PLAN']?.[0]?.Plan?.['Plan Rows'] ?? 0));
  if (expected <= exactUpTo) {
    const n = await count(exactUpTo + 1);
    if (n <= exactUpTo) return { count: n, estimated: false };
  }
  return { count: Math.max(expected, exactUpTo + 1), estimated: true };
}
