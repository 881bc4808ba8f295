// Input the database cannot hold or the parser should not walk: JSON nested too deep, numbers beyond
// PostgreSQL's integer types (or beyond a double: 1e309 parses as Infinity), dates outside years
// 1–9999, strings that are not valid Unicode. Each is PostHog's 400 body, decided before any SQL.
import { describe, expect, it } from 'vitest';
import { apiWithAccount, call } from '../../helpers.ts';

const { api, account } = await apiWithAccount();
const P = () => `/api/projects/${account.projectId}`;
/** A request with the account's key to a path under its project. */
const req = (method: string, path: string, body?: unknown) =>
  call(api.baseUrl, method, `${P()}${path}`, { key: account.apiKey, body });

function expect400(res: { status: number; body: any; text: string }, attr?: string | null) {
  expect(res.status, res.text.slice(0, 300)).toBe(400);
  expect(Object.keys(res.body).sort()).toEqual(['attr', 'code', 'detail', 'type']);
  if (attr !== undefined) expect(res.body.attr).toBe(attr);
}

describe('JSON nesting depth', () => {
  const deep = (depth: number) => '['.repeat(depth) + ']'.repeat(depth);

  it('refuses a body 10,000 levels deep on every kind of JSON route with a 400 parse_error', async () => {
    const body = `{"name": ${deep(10_000)}}`;
    for (const [method, path] of [
      ['POST', `${P()}/experiments/`],
      ['PATCH', `${P()}/event_definitions/1/`],
      ['POST', `${P()}/persons/bulk_delete/`],
    ] as const) {
      const res = await call(api.baseUrl, method, path, { key: account.apiKey, body });
      expect400(res, null);
      expect(res.body.type).toBe('invalid_request');
      expect(res.body.code).toBe('parse_error');
      expect(res.body.detail).toMatch(/nested/);
    }
  });

  it('counts only brackets outside strings', async () => {
    // 200 brackets (and escaped quotes) inside a string are text, not nesting.
    const name = '["\\'.repeat(100);
    const res = await req('POST', '/experiments/', { name, feature_flag_key: 'k-brackets' });
    expect(res.status, res.text).toBe(201);
    expect(res.body.name).toBe(name);
  });

  it('lets ordinary nesting through to the schema (30 deep: a validation error, not a parse error)', async () => {
    const body = `{"name": ${deep(30)}, "feature_flag_key": "k-deep"}`;
    const res = await req('POST', '/experiments/', body);
    expect400(res, 'name');
    expect(res.body.type).toBe('validation_error');
  });
});

describe('JSON nesting depth in query parameters', () => {
  // Brackets stay unencoded in a query: 7,000 levels fit in Node's 16 KB request head.
  const deep = '['.repeat(7000) + ']'.repeat(7000);
  it.each([
    ['GET', 'persons/?properties='],
    ['GET', 'event_definitions/?excluded_properties='],
    ['POST', 'persons/bulk_delete/?ids='],
  ])('%s %s<7,000 deep> is a 400 on that parameter', async (method, pathAndParam) => {
    const res = await req(method, `/${pathAndParam}${deep}`);
    expect400(res, pathAndParam.split('?')[1].slice(0, -1));
  });

  it('leaves text that merely starts with a bracket alone', async () => {
    const res = await req('GET', `/persons/?search=${encodeURIComponent(`${'['.repeat(100)}x`)}`);
    expect(res.status, res.text).toBe(200);
  });
});

describe('numbers out of range', () => {
  it.each(['1e309', '-1e309', '9999999999999999999', String(2 ** 63), '2147483648', '-2147483649'])(
    'created_by_id=%s in a query is a 400 on created_by_id',
    async (value) => {
      const res = await req('GET', `/experiments/?created_by_id=${encodeURIComponent(value)}`);
      expect400(res, 'created_by_id');
    },
  );

  it('keeps in-range values working', async () => {
    const res = await req('GET', '/experiments/?created_by_id=2147483647');
    expect(res.status, res.text).toBe(200);
    expect(res.body.results).toEqual([]);
  });

  it.each(['1e309', '-1e309', '9999999999999999999', '9223372036854775808', '2147483648'])(
    'an integer body field of %s is a 400 on that field',
    async (value) => {
      const body = `{"name": "x", "feature_flag_key": "k-bounds", "holdout_id": ${value}}`;
      const res = await req('POST', '/experiments/', body);
      expect400(res, 'holdout_id');
    },
  );

  it('person ids (bigint) take integers up to the largest exact one, and refuse larger', async () => {
    const ok = await req('POST', '/persons/bulk_delete/', { ids: [2 ** 53 - 1] });
    expect(ok.status, ok.text).toBeLessThan(300);
    const tooBig = await req('POST', '/persons/bulk_delete/', '{"ids": [1e309]}');
    expect400(tooBig);
  });
});

describe('dates out of range', () => {
  it.each(['0000-01-01', '0000-12-31T23:59:59Z', '-000001-01-01T00:00:00Z', '+010000-01-01T00:00:00Z'])(
    'date_to=%s is a 400 on date_to',
    async (value) => {
      const events = encodeURIComponent('[{"id":"a"}]');
      const person = await req('GET', `/persons/funnel/?events=${events}&date_to=${encodeURIComponent(value)}`);
      expect400(person, 'date_to');
    },
  );

  it.each(['0000-01-01T00:00:00Z', '0001-01-01T00:00:00+01:00', '9999-12-31T23:59:59-01:00'])(
    'an experiment start_date of %s (outside years 1–9999 in UTC) is a 400 on start_date',
    async (value) => {
      const res = await req('POST', '/experiments/', { name: 'dated', feature_flag_key: 'k-dated', start_date: value });
      expect400(res, 'start_date');
    },
  );

  it('takes the first and last representable days', async () => {
    for (const [key, start] of [
      ['k-first', '0001-01-01T00:00:00Z'],
      ['k-last', '9999-12-31T23:59:59Z'],
    ]) {
      const res = await req('POST', '/experiments/', { name: key, feature_flag_key: key, start_date: start });
      expect(res.status, res.text).toBe(201);
    }
  });
});

describe('strings that are not valid Unicode', () => {
  it('refuses a lone surrogate in a body string or key with a 400 naming the field', async () => {
    const body = '{"name": "a\\ud800b", "feature_flag_key": "k-sur1"}';
    const res = await req('POST', '/experiments/', body);
    expect400(res, 'name');
    const inKeyBody = '{"name": "x", "feature_flag_key": "k-sur", "parameters": {"\\udc00": 1}}';
    const inKey = await req('POST', '/experiments/', inKeyBody);
    expect400(inKey, 'parameters__\udc00');
  });

  it('still takes a correctly paired surrogate (an emoji)', async () => {
    const body = '{"name": "ok \\ud83d\\ude00", "feature_flag_key": "k-emoji"}';
    const res = await req('POST', '/experiments/', body);
    expect(res.status, res.text).toBe(201);
    expect(res.body.name).toBe('ok 😀');
  });
});
