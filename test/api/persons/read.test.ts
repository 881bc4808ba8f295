import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { capture } from '../../fixtures.ts';
import { call, createAccount, startApi, type TestAccount, type TestApi } from '../../helpers.ts';

let api: TestApi;
let account: TestAccount;
let other: TestAccount;
const P = () => `/api/projects/${account.projectId}/persons`;

beforeAll(async () => {
  api = await startApi();
  account = await createAccount(api.orm);
  other = await createAccount(api.orm);
  await capture(api.baseUrl, account.projectToken, [
    {
      event: 'e',
      distinct_id: 'ada',
      properties: {
        $set: { email: 'ada@example.com', name: 'Ada', age: 36, plan: 'pro', signup: '2024-01-10T00:00:00Z' },
      },
      timestamp: '2026-01-01T00:00:00Z',
    },
    {
      event: 'e',
      distinct_id: 'bob',
      properties: { $set: { email: 'bob@corp.io', age: 20, plan: 'free' } },
      timestamp: '2026-01-02T00:00:00Z',
    },
    {
      event: 'e',
      distinct_id: '0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b',
      properties: { $set: { age: 'unknown', formula: '=HYPERLINK("x")' } },
      timestamp: '2026-01-03T00:00:00Z',
    },
    {
      event: '$identify',
      distinct_id: 'bob',
      properties: { $anon_distinct_id: 'bob-anon-device' },
      timestamp: '2026-01-02T00:01:00Z',
    },
  ]);
  // Another project with the same distinct id and email: never visible here.
  await capture(api.baseUrl, other.projectToken, [
    { event: 'e', distinct_id: 'ada', properties: { $set: { email: 'ada@example.com' } } },
  ]);
});
afterAll(() => api.close());

const list = async (query = '') => (await call(api.baseUrl, 'GET', `${P()}/${query}`, { key: account.apiKey })).body;
const names = (body: any) => body.results.map((p: any) => p.name).sort();

describe('GET /persons', () => {
  it('lists newest first with PostHog’s list item shape (the seed’s integer id) and always a count', async () => {
    const body = await list();
    expect(body.count).toBe(3);
    expect(body).toMatchObject({ next: null, previous: null });
    expect((await list('?include_total')).count).toBe(3);
    expect((await list('?include_total=true&email=bob@corp.io')).count).toBe(1);
    const firstPage = await list('?limit=2');
    expect(firstPage.next).toContain('offset=2');
    expect((await list('?limit=3')).next).toBeNull(); // a full last page has no next (PostHog would offer an empty one)
    expect(body.results.map((p: any) => p.name)).toEqual([
      '0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b',
      'bob@corp.io',
      'ada@example.com',
    ]);
    const bob = body.results[1];
    expect(bob).toMatchObject({
      type: 'person',
      is_identified: true,
      matched_recordings: [],
      value_at_data_point: null,
    });
    expect(typeof bob.id).toBe('number');
    expect(bob.distinct_ids.sort()).toEqual(['bob', 'bob-anon-device']);
  });

  it('filters by distinct_id (any of the person’s ids), email and search', async () => {
    expect(names(await list('?distinct_id=bob-anon-device'))).toEqual(['bob@corp.io']);
    expect((await list('?distinct_id=nobody')).results).toEqual([]);
    expect(names(await list('?email=ada@example.com'))).toEqual(['ada@example.com']);
    expect(names(await list('?search=CORP'))).toEqual(['bob@corp.io']);
    expect(names(await list('?search=ada'))).toEqual(['ada@example.com']);
    expect(names(await list('?search=ADA'))).toEqual(['ada@example.com']); // name or email, any case
    expect(names(await list('?search=bob-anon-device'))).toEqual(['bob@corp.io']); // exact distinct id
    expect((await list('?search=bob-anon')).results).toEqual([]); // distinct ids match exactly, not by substring
    const ada = (await list('?email=ada@example.com')).results[0];
    expect(names(await list(`?search=${ada.uuid}`))).toEqual(['ada@example.com']);
    expect((await list('?search=%25')).results).toEqual([]); // a literal %, not a wildcard
  });

  const cases: [string, unknown, string[]][] = [
    ['exact (default)', [{ key: 'plan', value: 'pro' }], ['ada@example.com']],
    ['exact list', [{ key: 'plan', value: ['pro', 'free'], operator: 'exact' }], ['ada@example.com', 'bob@corp.io']],
    [
      'is_not',
      [{ key: 'plan', value: 'pro', operator: 'is_not' }],
      ['0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b', 'bob@corp.io'],
    ],
    ['icontains', [{ key: 'email', value: 'EXAMPLE', operator: 'icontains' }], ['ada@example.com']],
    [
      'not_icontains',
      [{ key: 'email', value: 'example', operator: 'not_icontains' }],
      ['0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b', 'bob@corp.io'],
    ],
    ['regex', [{ key: 'email', value: '^b.*io$', operator: 'regex' }], ['bob@corp.io']],
    ['regex (invalid pattern: no match, no error)', [{ key: 'email', value: '([', operator: 'regex' }], []],
    [
      'not_regex',
      [{ key: 'email', value: '^b', operator: 'not_regex' }],
      ['0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b', 'ada@example.com'],
    ],
    ['gt (non-numbers never match)', [{ key: 'age', value: 25, operator: 'gt' }], ['ada@example.com']],
    ['gte', [{ key: 'age', value: '20', operator: 'gte' }], ['ada@example.com', 'bob@corp.io']],
    ['lt', [{ key: 'age', value: 30, operator: 'lt' }], ['bob@corp.io']],
    ['lte', [{ key: 'age', value: 36, operator: 'lte' }], ['ada@example.com', 'bob@corp.io']],
    ['between', [{ key: 'age', value: [30, 40], operator: 'between' }], ['ada@example.com']],
    ['is_set', [{ key: 'email', value: 'is_set', operator: 'is_set' }], ['ada@example.com', 'bob@corp.io']],
    ['is_not_set', [{ key: 'email', operator: 'is_not_set' }], ['0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b']],
    ['is_date_before', [{ key: 'signup', value: '2024-02-01', operator: 'is_date_before' }], ['ada@example.com']],
    ['is_date_after', [{ key: 'signup', value: '2024-02-01', operator: 'is_date_after' }], []],
    [
      'OR group',
      {
        type: 'OR',
        values: [
          { key: 'plan', value: 'pro' },
          { key: 'age', value: 20 },
        ],
      },
      ['ada@example.com', 'bob@corp.io'],
    ],
    [
      'AND of OR groups',
      {
        type: 'AND',
        values: [
          {
            type: 'OR',
            values: [
              { key: 'plan', value: 'pro' },
              { key: 'plan', value: 'free' },
            ],
          },
          { key: 'age', value: 30, operator: 'gt' },
        ],
      },
      ['ada@example.com'],
    ],
    ['SQL metacharacters are data', [{ key: "email'; drop table person; --", value: "x' or '1'='1" }], []],
  ];
  it.each(cases)('properties: %s', async (_name, filter, expected) => {
    const body = await list(`?properties=${encodeURIComponent(JSON.stringify(filter))}`);
    expect(names(body)).toEqual(expected);
  });

  it('answers malformed property filters with 400', async () => {
    for (const bad of [
      'not json',
      '[{"value": 1}]',
      '[{"key": "a", "operator": "nope"}]',
      '[{"key": "a", "operator": "gt", "value": "x"}]',
      '[{"type": "cohort", "value": 999999}]',
    ]) {
      const res = await call(api.baseUrl, 'GET', `${P()}/?properties=${encodeURIComponent(bad)}`, {
        key: account.apiKey,
      });
      expect(res.status, bad).toBe(400);
      expect(res.body.attr).toBe('properties');
    }
  });

  it('pages without gaps or duplicates when created_at ties', async () => {
    const seen: string[] = [];
    let path: string | null = `${P()}/?limit=1`;
    while (path) {
      const res: any = await call(api.baseUrl, 'GET', path, { key: account.apiKey });
      seen.push(...res.body.results.map((p: any) => p.uuid));
      path = res.body.next ? res.body.next.slice(api.baseUrl.length) : null;
    }
    expect(seen).toHaveLength(3);
    expect(new Set(seen).size).toBe(3);
  });

  it('never shows another project’s persons', async () => {
    const res = await call(api.baseUrl, 'GET', `/api/projects/${other.projectId}/persons/`, { key: account.apiKey });
    expect(res.status).toBe(403);
    expect((await list('?distinct_id=ada')).results).toHaveLength(1);
  });
});

describe('CSV', () => {
  it('exports sorted flattened columns, one line per person, escaping formulas', async () => {
    const res = await fetch(`${api.baseUrl}${P()}/?format=csv`, {
      headers: { authorization: `Bearer ${account.apiKey}` },
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toContain('text/csv');
    const lines = (await res.text()).trim().split('\r\n');
    expect(lines).toHaveLength(4);
    const header = lines[0].split(',');
    expect(header).toEqual([...header].sort());
    expect(header).toContain('properties.email');
    expect(header).toContain('distinct_ids.1');
    expect(lines.join('\n')).toContain(`"'=HYPERLINK(""x"")"`);
    const filtered = await fetch(
      `${api.baseUrl}${P()}/?format=csv&properties=${encodeURIComponent('[{"key":"plan","value":"pro"}]')}`,
      { headers: { authorization: `Bearer ${account.apiKey}` } },
    );
    expect((await filtered.text()).trim().split('\r\n')).toHaveLength(2);
  });
});

describe('GET /persons/:id', () => {
  it('retrieves by numeric id and by uuid, with the detail shape', async () => {
    const item = (await list('?email=ada@example.com')).results[0];
    const byUuid = await call(api.baseUrl, 'GET', `${P()}/${item.uuid}/`, { key: account.apiKey });
    expect(byUuid.status).toBe(200);
    expect(Object.keys(byUuid.body).sort()).toEqual([
      'created_at',
      'distinct_ids',
      'id',
      'last_seen_at',
      'name',
      'properties',
      'uuid',
    ]);
    expect(typeof byUuid.body.id).toBe('number');
    const byId = await call(api.baseUrl, 'GET', `${P()}/${byUuid.body.id}`, { key: account.apiKey });
    expect(byId.body).toEqual(byUuid.body);
  });

  it('answers a distinct id with PostHog’s 400 and unknown or foreign persons with 404', async () => {
    const res = await call(api.baseUrl, 'GET', `${P()}/ada/`, { key: account.apiKey });
    expect(res.status).toBe(400);
    expect(res.body.detail).toBe(
      'The ID provided does not look like a personID. If you are using a distinctId, please use /persons?distinct_id=<id> instead.',
    );
    expect((await call(api.baseUrl, 'GET', `${P()}/99999999/`, { key: account.apiKey })).status).toBe(404);
    const foreign = (await call(api.baseUrl, 'GET', `/api/projects/${other.projectId}/persons/`, { key: other.apiKey }))
      .body.results[0];
    expect((await call(api.baseUrl, 'GET', `${P()}/${foreign.uuid}/`, { key: account.apiKey })).status).toBe(404);
  });

  it('refuses to create persons through the API with PostHog’s 405', async () => {
    const res = await call(api.baseUrl, 'POST', `${P()}/`, { key: account.apiKey, body: {} });
    expect(res.status).toBe(405);
    expect(res.body.detail).toMatch(/^Creating persons via this API is not allowed/);
  });
});
