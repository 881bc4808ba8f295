// Property filters are written so an index can serve them (exact: containment candidates ANDed in front;
// icontains: `ilike … and … is not null`; try_numeric without an exception block). These pin that they
// match exactly the persons they matched before.
import { describe, expect, it } from 'vitest';
import { rows } from '../../../shared/platform/db/sql.ts';
import { personListFilter } from '../../../shared/persons/store.ts';
import { sql } from '../../db.ts';
import { apiWithAccount, call } from '../../helpers.ts';

const { api, account } = await apiWithAccount();
const people: Record<string, unknown> = {
  str5: { v: '5' },
  num5: { v: 5 },
  big: { v: 'BIG' }, // replaced by 12345678901234567890 as a JSON number in the insert
  bool: { v: true },
  boolText: { v: 'true' },
  obj: { v: { a: 1, b: [1, 2] } },
  nul: { v: null },
  spaced: { v: ' 7 ' },
  nan: { v: 'NaN' },
  word: { v: 'Hello World' },
  none: { other: 1 },
};
for (const [name, properties] of Object.entries(people)) {
  // Raw SQL, so a long number keeps every digit (JSON.stringify would round it).
  const json = JSON.stringify({ ...(properties as object), name }).replace('"BIG"', '12345678901234567890');
  await sql(api.orm, `insert into person (uuid, project_id, properties) values (gen_random_uuid(), ?, ?::jsonb)`, [
    account.projectId,
    json,
  ]);
}

async function names(filter: unknown[]): Promise<string[]> {
  const q = encodeURIComponent(JSON.stringify(filter));
  const res = await call(api.baseUrl, 'GET', `/api/projects/${account.projectId}/persons/?properties=${q}`, {
    key: account.apiKey,
  });
  expect(res.status, res.text).toBe(200);
  return res.body.results.map((p: { properties: { name: string } }) => p.properties.name).sort();
}

describe('property filters in their indexable forms', () => {
  it('exact matches the value and its text, numbers sent as strings and long numbers to the digit', async () => {
    expect(await names([{ key: 'v', value: '5' }])).toEqual(['num5', 'str5']);
    expect(await names([{ key: 'v', value: 5 }])).toEqual(['num5', 'str5']);
    expect(await names([{ key: 'v', value: '12345678901234567890' }])).toEqual(['big']);
    expect(await names([{ key: 'v', value: 'true' }])).toEqual(['bool', 'boolText']);
    expect(await names([{ key: 'v', value: '{"a": 1, "b": [1, 2]}' }])).toEqual(['obj']);
    expect(await names([{ key: 'v', value: ['5', 'true'] }])).toEqual(['bool', 'boolText', 'num5', 'str5']);
    expect(await names([{ key: 'v', value: '"\\u0000"' }])).toEqual([]);
  });

  it('is_not keeps persons without the key', async () => {
    const all = Object.keys(people).sort();
    const expected = all.filter((n) => !['num5', 'str5'].includes(n));
    expect(await names([{ key: 'v', value: '5', operator: 'is_not' }])).toEqual(expected);
  });

  it('icontains, is_set and is_not_set', async () => {
    expect(await names([{ key: 'v', value: 'WORLD', operator: 'icontains' }])).toEqual(['word']);
    expect(await names([{ key: 'v', value: 'world', operator: 'not_icontains' }])).not.toContain('word');
    expect(await names([{ key: 'other', operator: 'is_set' }])).toEqual(['none']);
    expect((await names([{ key: 'v', operator: 'is_not_set' }])).sort()).toEqual(['none']);
  });

  it('gt/lt read numbers as PostgreSQL does, spaces included; NaN and what is not a number never match (nan > x is false in PostHog’s ClickHouse)', async () => {
    expect(await names([{ key: 'v', value: 6, operator: 'gt' }])).toEqual(['big', 'spaced']);
    expect(await names([{ key: 'v', value: 6, operator: 'lt' }])).toEqual(['num5', 'str5']);
    expect(await names([{ key: 'v', value: 5, operator: 'gte' }])).toEqual(['big', 'num5', 'spaced', 'str5']);
    expect(await names([{ key: 'v', value: 5, operator: 'lte' }])).toEqual(['num5', 'str5']);
    expect(await names([{ key: 'v', value: [5, 7], operator: 'between' }])).toEqual(['num5', 'spaced', 'str5']);
    const all = Object.keys(people).sort();
    expect(await names([{ key: 'v', value: [5, 7], operator: 'not_between' }])).toEqual(
      all.filter((n) => !['num5', 'spaced', 'str5'].includes(n)),
    );
  });

  it('a JSON number failing gt is rejected by the JSON-number check before try_numeric reads its text', async () => {
    const where = await personListFilter(api.orm.em.fork(), account.projectId, {
      properties: [{ key: 'v', value: 6, operator: 'gt' }],
    });
    const [plan] = await rows<{ 'QUERY PLAN': unknown }>(
      api.orm.em.fork(),
      `explain (format json, verbose) select p.* from person p where ${where.sql}`,
      where.params,
    );
    const filter = JSON.stringify(plan['QUERY PLAN']);
    expect(filter).toContain('jsonb_typeof');
    // try_numeric is inlined: its length guard and regular expression come after the check.
    expect(filter.indexOf('jsonb_typeof')).toBeLessThan(filter.indexOf('length('));
  });
});
