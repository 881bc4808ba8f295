// Seed: the persons list answers the pagination envelope {count, next, previous, results}, count
// always, and each Person's `id` is the integer id (as retrieve answers), `uuid` beside it.
import { describe, expect, it } from 'vitest';
import { capture } from '../../fixtures.ts';
import { sql } from '../../db.ts';
import { apiWithAccount, call, createAccount } from '../../helpers.ts';

const { api, account } = await apiWithAccount();
const P = () => `/api/projects/${account.projectId}/persons`;
const list = async (query = '') => {
  const res = await call(api.baseUrl, 'GET', `${P()}/${query}`, { key: account.apiKey });
  expect(res.status, res.text).toBe(200);
  return res.body;
};

await capture(
  api.baseUrl,
  account.projectToken,
  ['p1', 'p2', 'p3', 'p4', 'p5'].map((distinct_id, i) => ({
    event: 'e',
    distinct_id,
    properties: { $set: { email: `${distinct_id}@example.com`, plan: i % 2 ? 'pro' : 'free' } },
  })),
);

describe('GET /persons envelope', () => {
  it('always has count, the number of matching persons, whatever the page', async () => {
    const all = await list();
    expect(Object.keys(all).sort()).toEqual(['count', 'next', 'previous', 'results']);
    expect(all.count).toBe(5);
    const page = await list('?limit=2&offset=2');
    expect(page.count).toBe(5);
    expect(page.results).toHaveLength(2);
    expect(page.next).toContain('offset=4');
    expect(page.previous).not.toBeNull();
    expect((await list('?offset=50')).count).toBe(5);
    const pro = encodeURIComponent(JSON.stringify([{ key: 'plan', value: 'pro' }]));
    expect((await list(`?properties=${pro}`)).count).toBe(2);
    expect((await list('?email=p3@example.com')).count).toBe(1);
    expect(await list('?distinct_id=nobody')).toEqual({ count: 0, next: null, previous: null, results: [] });
    expect((await list('?include_total')).count).toBe(5); // PostHog's flag still accepted
  });

  it('gives each person its integer id, the one retrieve answers, with uuid beside it', async () => {
    const { results } = await list();
    for (const item of results) {
      expect(Number.isInteger(item.id)).toBe(true);
      expect(item.uuid).toMatch(/^[0-9a-f-]{36}$/);
      const byId = await call(api.baseUrl, 'GET', `${P()}/${item.id}/`, { key: account.apiKey });
      expect(byId.body).toMatchObject({ id: item.id, uuid: item.uuid });
    }
  });

  it('exports the integer id in the CSV id column', async () => {
    const res = await fetch(`${api.baseUrl}${P()}/?format=csv&email=p2@example.com`, {
      headers: { authorization: `Bearer ${account.apiKey}` },
    });
    const [header, row] = (await res.text())
      .trim()
      .split('\r\n')
      .map((line) => line.split(','));
    const person = (await list('?email=p2@example.com')).results[0];
    expect(row[header.indexOf('id')]).toMatch(/^\d+$/);
    expect(row[header.indexOf('id')]).toBe(String(person.id));
    expect(row[header.indexOf('uuid')]).toBe(person.uuid);
  });
});

describe('count of a large match', () => {
  it('is estimated (flagged) past 10,000 matches, exact on the last page and with include_total', async () => {
    const big = api;
    const many = await createAccount(api.orm);
    const N = 12_000;
    await sql(
      big.orm,
      `insert into person (uuid, project_id, properties, created_at)
       select gen_random_uuid(), ?, jsonb_build_object('n', g, 'even', g % 2 = 0), now() - make_interval(secs => g)
         from generate_series(1, ?) g`,
      [many.projectId, N],
    );
    await sql(big.orm, 'analyze person');
    const get = (query: string) =>
      call(big.baseUrl, 'GET', `/api/projects/${many.projectId}/persons/${query}`, { key: many.apiKey });

    const first = await get('?limit=10');
    expect(first.body.results).toHaveLength(10);
    expect(first.headers.get('x-count-estimated')).toBe('true');
    expect(first.body.count).toBeGreaterThan(10_000);
    expect(Math.abs(first.body.count - N)).toBeLessThan(N * 0.2); // the planner's estimate after analyze

    const exact = await get('?limit=10&include_total');
    expect(exact.body.count).toBe(N);
    expect(exact.headers.get('x-count-estimated')).toBeNull();

    const last = await get(`?limit=10&offset=${N - 4}`);
    expect(last.body).toMatchObject({ count: N, next: null });
    expect(last.headers.get('x-count-estimated')).toBeNull();

    const few = await get(`?limit=10&properties=${encodeURIComponent(JSON.stringify([{ key: 'n', value: 7 }]))}`);
    expect(few.body.count).toBe(1);
    const lt = encodeURIComponent(JSON.stringify([{ key: 'n', operator: 'lt', value: 5001 }]));
    const half = await get(`?limit=10&offset=10&properties=${lt}`);
    expect(half.body.count).toBe(5000); // under the limit: counted exactly
    expect(half.headers.get('x-count-estimated')).toBeNull();
  });
});
