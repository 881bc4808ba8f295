// One page of a list query and its `count`, for every store: the page is read with one row past it
// (so `next` is exact without a count), and the count is skipped when the page already tells it.
import type { EntityManager } from '@mikro-orm/postgresql';
import { sql, type SelectQueryBuilder } from 'kysely';
import { db, type DB } from './kysely.ts';

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
 * The page of a typed query (db(em), ordered with a unique tie-break) and how many rows it matches. The
 * page is read one row past it (`read` may wrap the limited query, e.g. to attach what each row owns).
 * With `exactUpTo`, a match the planner expects to be larger is not counted (at a million rows a count
 * costs 100x the page): the estimate is returned, never below the rows known to exist.
 */
export async function pagedSelect<QDB extends DB, TB extends keyof QDB, O, R = O>(
  em: EntityManager,
  query: SelectQueryBuilder<QDB, TB, O>,
  page: Page,
  options: { exactUpTo?: number; read?: (pageQuery: SelectQueryBuilder<QDB, TB, O>) => Promise<R[]> } = {},
): Promise<PageResult<R>> {
  const limited = query.limit(page.limit + 1).offset(page.offset);
  // Without `read`, R is O (its default): the rows are the query's own.
  const found = options.read ? await options.read(limited) : ((await limited.execute()) as unknown as R[]);
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
