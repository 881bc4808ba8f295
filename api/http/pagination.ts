import type { Context } from 'koa';
import type { Page } from '../../shared/platform/db/paged.ts';

export const DEFAULT_PAGE_SIZE = 100;

/** Query-schema properties of a paginated list (the route layer drops unusable values, as DRF does). */
export const PAGE_QUERY_PROPERTIES = {
  limit: { type: 'integer', format: 'int64', description: 'Number of results per page (default 100).' },
  offset: { type: 'integer', format: 'int64', description: 'Index of the first result.' },
} as const;

export type { Page };

/** DRF LimitOffsetPagination: a non-integer or non-positive limit falls back to 100; a bad offset is 0. */
// Beyond this PostgreSQL's bigint LIMIT/OFFSET would overflow; no real page is that large.
const MAX_POSITION = Number.MAX_SAFE_INTEGER;

// Only numbers and numeric strings count: Number() of some objects throws ({"valueOf": 1, "toString": 1}).
const numberOf = (value: unknown) =>
  typeof value === 'number' ? value : typeof value === 'string' ? Number(value) : Number.NaN;

export function pageOf(query: Record<string, unknown>, defaultLimit = DEFAULT_PAGE_SIZE, maxLimit?: number): Page {
  const limit = Math.min(numberOf(query.limit), MAX_POSITION);
  const offset = Math.min(numberOf(query.offset), MAX_POSITION);
  let pageLimit = Number.isInteger(limit) && limit > 0 ? limit : defaultLimit;
  if (maxLimit !== undefined) pageLimit = Math.min(pageLimit, maxLimit);
  return { limit: pageLimit, offset: Number.isInteger(offset) && offset > 0 ? offset : 0 };
}

/** The request URL with `changes` applied (undefined removes a key) and keys sorted, as DRF builds it. */
function urlWith(ctx: Context, changes: Record<string, string | undefined>): string {
  const params = new URLSearchParams(ctx.querystring);
  for (const [key, value] of Object.entries(changes)) {
    if (value === undefined) params.delete(key);
    else params.set(key, value);
  }
  params.sort();
  const qs = params.toString();
  return `${ctx.protocol}://${ctx.host}${ctx.state.requestPath ?? ctx.path}${qs ? `?${qs}` : ''}`;
}

/** Absolute next/previous URLs that keep the other query parameters. */
export function pageLinks(ctx: Context, page: Page, hasMore: boolean) {
  const { limit, offset } = page;
  const next = hasMore ? urlWith(ctx, { limit: String(limit), offset: String(offset + limit) }) : null;
  let previous: string | null = null;
  if (offset > 0) {
    previous =
      offset - limit <= 0
        ? urlWith(ctx, { limit: String(limit), offset: undefined })
        : urlWith(ctx, { limit: String(limit), offset: String(offset - limit) });
  }
  return { next, previous };
}

/** `{count, next, previous, results}`. */
export function paginated<T>(ctx: Context, page: Page, count: number, results: T[]) {
  return { count, ...pageLinks(ctx, page, page.offset + page.limit < count), results };
}

/** A page of a list already in memory (short lists: a user's organizations and projects). */
export function paginatedList<T>(ctx: Context, items: T[]) {
  const page = pageOf(ctx.state.query ?? {});
  return paginated(ctx, page, items.length, items.slice(page.offset, page.offset + page.limit));
}

/** The JSON schema of a page of `item`, for route `responses`. `count` may be optional (persons list). */
export function paginatedSchema(item: Record<string, unknown>, options: { countOptional?: boolean } = {}) {
  return {
    type: 'object',
    required: options.countOptional ? ['next', 'previous', 'results'] : ['count', 'next', 'previous', 'results'],
    properties: {
      count: { type: 'integer' },
      next: { type: ['string', 'null'] },
      previous: { type: ['string', 'null'] },
      results: { type: 'array', items: item },
    },
  };
}
