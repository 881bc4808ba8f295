// DRF-style limit/offset pagination on its own: pageOf's reading of the query, and the next/previous links.
import fc from 'fast-check';
import type { Context } from 'koa';
import { describe, expect, it } from 'vitest';
import { DEFAULT_PAGE_SIZE, pageLinks, pageOf, paginated, paginatedList } from '../../../api/http/pagination.ts';

/** The fields the link builders read, nothing else. */
function ctxOf(querystring: string, options: { path?: string; requestPath?: string; query?: object } = {}) {
  return {
    querystring,
    protocol: 'https',
    host: 'example.test:8443',
    path: options.path ?? '/api/projects/1/persons/',
    state: { requestPath: options.requestPath, query: options.query },
  } as unknown as Context;
}

describe('pageOf', () => {
  it('defaults: limit 100, offset 0', () => {
    expect(DEFAULT_PAGE_SIZE).toBe(100);
    expect(pageOf({})).toEqual({ limit: 100, offset: 0 });
  });

  it('reads integers, given as numbers or strings', () => {
    expect(pageOf({ limit: 10, offset: 20 })).toEqual({ limit: 10, offset: 20 });
    expect(pageOf({ limit: '10', offset: '20' })).toEqual({ limit: 10, offset: 20 });
  });

  it.each([0, -1, 2.5, '', 'abc', null, undefined, Number.NaN, '10abc', {}, [1, 2]])(
    'an unusable limit (%s) falls back to the default',
    (limit) => {
      expect(pageOf({ limit })).toEqual({ limit: 100, offset: 0 });
      expect(pageOf({ limit }, 25)).toEqual({ limit: 25, offset: 0 });
    },
  );

  it.each([-1, -100, 2.5, '', 'x', null, Number.NaN, Number.NEGATIVE_INFINITY])(
    'an unusable offset (%s) is 0',
    (offset) => {
      expect(pageOf({ limit: 5, offset })).toEqual({ limit: 5, offset: 0 });
    },
  );

  it('maxLimit caps the limit, the default included', () => {
    expect(pageOf({ limit: 5000 }, 100, 1000)).toEqual({ limit: 1000, offset: 0 });
    expect(pageOf({ limit: 50 }, 100, 1000)).toEqual({ limit: 50, offset: 0 });
    expect(pageOf({}, 100, 10)).toEqual({ limit: 10, offset: 0 });
  });

  it('huge values are clamped to the largest safe integer (no bigint overflow in SQL)', () => {
    expect(pageOf({ limit: '1e30', offset: 1e30 })).toEqual({
      limit: Number.MAX_SAFE_INTEGER,
      offset: Number.MAX_SAFE_INTEGER,
    });
    expect(pageOf({ limit: '99999999999999999999' }, 100, 1000).limit).toBe(1000);
    // Infinity too (DRF's int() would refuse it and use the default): "no limit", read as the largest page.
    expect(pageOf({ limit: 'Infinity' }).limit).toBe(Number.MAX_SAFE_INTEGER);
  });

  it('an object that cannot become a number is a bad value, not a crash', () => {
    expect(pageOf({ limit: { valueOf: 1, toString: 1 }, offset: { valueOf: 1, toString: 1 } })).toEqual({
      limit: DEFAULT_PAGE_SIZE,
      offset: 0,
    });
  });

  it('property: the result is always a positive safe integer limit and a non-negative safe integer offset', () => {
    const anything = fc.oneof(
      fc.jsonValue(),
      fc.double(),
      fc.integer(),
      fc.string(),
      fc.stringMatching(/^-?\d{1,25}(\.\d+)?$/),
    );
    fc.assert(
      fc.property(
        anything,
        anything,
        fc.option(fc.integer({ min: 1, max: 10_000 }), { nil: undefined }),
        (l, o, max) => {
          const { limit, offset } = pageOf({ limit: l, offset: o }, DEFAULT_PAGE_SIZE, max);
          expect(Number.isSafeInteger(limit) && limit > 0).toBe(true);
          expect(Number.isSafeInteger(offset) && offset >= 0).toBe(true);
          expect(limit).toBeLessThanOrEqual(max ?? Number.MAX_SAFE_INTEGER);
        },
      ),
    );
  });
});

describe('pageLinks', () => {
  const base = 'https://example.test:8443/api/projects/1/persons/';

  it('first page with more: next only', () => {
    expect(pageLinks(ctxOf(''), { limit: 100, offset: 0 }, true)).toEqual({
      next: `${base}?limit=100&offset=100`,
      previous: null,
    });
  });

  it('last page: no next', () => {
    expect(pageLinks(ctxOf('limit=10&offset=30'), { limit: 10, offset: 30 }, false)).toEqual({
      next: null,
      previous: `${base}?limit=10&offset=20`,
    });
  });

  it('other query parameters are kept, and the keys sorted', () => {
    const ctx = ctxOf('search=a%20b&offset=20&format=json&limit=10&distinct_id=x%26y');
    expect(pageLinks(ctx, { limit: 10, offset: 20 }, true)).toEqual({
      next: `${base}?distinct_id=x%26y&format=json&limit=10&offset=30&search=a+b`,
      previous: `${base}?distinct_id=x%26y&format=json&limit=10&offset=10&search=a+b`,
    });
  });

  it('previous drops offset when it would be 0 or less, and keeps the limit', () => {
    const at = (offset: number) => pageLinks(ctxOf(`offset=${offset}&z=1`), { limit: 10, offset }, false).previous;
    expect(at(10)).toBe(`${base}?limit=10&z=1`);
    expect(at(5)).toBe(`${base}?limit=10&z=1`);
    expect(at(11)).toBe(`${base}?limit=10&offset=1&z=1`);
    expect(at(0)).toBeNull();
  });

  it('the limit in the links is the page limit, not what the query asked for', () => {
    // e.g. limit=5000 capped at 1000 by the route: the links say 1000.
    expect(pageLinks(ctxOf('limit=5000'), { limit: 1000, offset: 0 }, true).next).toBe(
      `${base}?limit=1000&offset=1000`,
    );
  });

  it('repeated keys are kept in their order; sorting is stable', () => {
    expect(pageLinks(ctxOf('tag=b&tag=a&a=1'), { limit: 1, offset: 0 }, true).next).toBe(
      `${base}?a=1&limit=1&offset=1&tag=b&tag=a`,
    );
  });

  it('state.requestPath wins over path (a rewritten request keeps its public path)', () => {
    const ctx = ctxOf('', { path: '/internal/x', requestPath: '/api/public/' });
    expect(pageLinks(ctx, { limit: 1, offset: 0 }, true).next).toBe(
      'https://example.test:8443/api/public/?limit=1&offset=1',
    );
  });
});

describe('paginated and paginatedList', () => {
  const base = 'https://example.test:8443/api/projects/1/persons/';

  it('next exactly when offset + limit < count', () => {
    const ctx = ctxOf('');
    expect(paginated(ctx, { limit: 2, offset: 0 }, 3, ['a', 'b'])).toEqual({
      count: 3,
      next: `${base}?limit=2&offset=2`,
      previous: null,
      results: ['a', 'b'],
    });
    expect(paginated(ctx, { limit: 2, offset: 1 }, 3, ['b', 'c']).next).toBeNull();
    expect(paginated(ctx, { limit: 2, offset: 0 }, 0, [])).toEqual({
      count: 0,
      next: null,
      previous: null,
      results: [],
    });
  });

  it('paginatedList slices the list by the query in state', () => {
    const items = ['a', 'b', 'c', 'd', 'e'];
    const ctx = ctxOf('limit=2&offset=2', { query: { limit: 2, offset: 2 } });
    expect(paginatedList(ctx, items)).toEqual({
      count: 5,
      next: `${base}?limit=2&offset=4`,
      previous: `${base}?limit=2`,
      results: ['c', 'd'],
    });
  });

  it('paginatedList without a query: the first 100', () => {
    const items = Array.from({ length: 150 }, (_, i) => i);
    const page = paginatedList(ctxOf(''), items);
    expect(page.results).toEqual(items.slice(0, 100));
    expect(page.next).toBe(`${base}?limit=100&offset=100`);
  });

  it('property: following next links visits every item once, in order', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 60 }), fc.integer({ min: 1, max: 15 }), (n, limit) => {
        const items = Array.from({ length: n }, (_, i) => i);
        const seen: number[] = [];
        let url: string | null = `${base}?limit=${limit}`;
        for (let pages = 0; url !== null && pages <= n + 1; pages++) {
          const querystring = new URL(url).search.slice(1);
          const query = Object.fromEntries(new URLSearchParams(querystring));
          const page: ReturnType<typeof paginatedList<number>> = paginatedList(ctxOf(querystring, { query }), items);
          seen.push(...page.results);
          url = page.next;
        }
        expect(seen).toEqual(items);
      }),
    );
  });
});
