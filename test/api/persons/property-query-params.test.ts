// Seed: update_property takes `key` and `value`, delete_property takes `$unset`, as query parameters.
// A JSON body keeps working; a query `value` is JSON when it parses as JSON, else the raw string.
import { MAX_JSON_DEPTH } from '../../../api/http/json.ts';
import { describe, expect, it } from 'vitest';
import { sql } from '../../db.ts';
import { capture } from '../../fixtures.ts';
import { apiWithAccount, call } from '../../helpers.ts';

const { api, account } = await apiWithAccount();
const P = () => `/api/projects/${account.projectId}/persons`;
const post = (path: string, body?: unknown) =>
  call(api.baseUrl, 'POST', `${P()}/${path}`, { key: account.apiKey, body });

async function newPerson(distinctId: string, properties: Record<string, unknown> = {}) {
  const event = { event: 'seed', distinct_id: distinctId, properties: { $set: properties } };
  await capture(api.baseUrl, account.projectToken, [event]);
  const res = await call(api.baseUrl, 'GET', `${P()}/?distinct_id=${distinctId}`, { key: account.apiKey });
  return res.body.results[0] as { id: number; uuid: string };
}

const q = (params: Record<string, string>) => new URLSearchParams(params).toString();

describe('update_property with query parameters', () => {
  it('sets the key to the JSON value of `value`, or to the raw string when it is not JSON', async () => {
    const person = await newPerson('qp1');
    const cases: [string, unknown][] = [
      ['42', 42],
      ['true', true],
      ['null', null],
      ['"quoted"', 'quoted'],
      ['{"a":[1,2]}', { a: [1, 2] }],
      ['plain text', 'plain text'],
      ['', ''],
      // Beyond 2^53 a JSON number would silently change: kept as the string sent.
      ['123456789012345678901', '123456789012345678901'],
      ['1e400', '1e400'],
    ];
    for (const [raw, expected] of cases) {
      const res = await post(`${person.uuid}/update_property/?${q({ key: 'k', value: raw })}`);
      expect(res.status, `${raw}: ${res.text}`).toBe(200);
      expect(res.body.properties.k).toEqual(expected);
    }
    const [event] = await sql(
      api.orm,
      `select properties from event where project_id = ? and event = '$set' order by timestamp limit 1`,
      [account.projectId],
    );
    expect(event.properties).toEqual({ $set: { k: 42 } });
  });

  it('a JSON body keeps working and wins over the query', async () => {
    const person = await newPerson('qp2');
    const body = { key: 'plan', value: 'pro' };
    const res = await post(`${person.id}/update_property/?${q({ key: 'ignored', value: '1' })}`, body);
    expect(res.status).toBe(200);
    expect(res.body.properties).toMatchObject({ plan: 'pro' });
    expect(res.body.properties).not.toHaveProperty('ignored');
  });

  it('missing value, then missing key, answer the hand-built 400s; bad query values a 400', async () => {
    const person = await newPerson('qp3');
    const noValue = await post(`${person.id}/update_property/?${q({ key: 'k' })}`);
    expect(noValue.status).toBe(400);
    const swapped = { type: 'validation_error', code: 'This field is required.', detail: 'required', attr: 'value' };
    expect(noValue.body).toEqual(swapped);
    const noKey = await post(`${person.id}/update_property/?${q({ value: '1' })}`);
    expect(noKey.status).toBe(400);
    expect(noKey.body.attr).toBe('key');
    const twoKeys = await post(`${person.id}/update_property/?key=a&key=b&value=1`);
    expect(twoKeys.status).toBe(400);
    expect(twoKeys.body.attr).toBe('key');
    // JSON escapes can make a NUL character, which PostgreSQL cannot store.
    const nul = await post(`${person.id}/update_property/?${q({ key: 'k', value: '"a\\u0000b"' })}`);
    expect(nul.status).toBe(400);
    expect(nul.body).toMatchObject({ type: 'validation_error', code: 'null_characters_not_allowed' });
    // Nested as deep as a body may be: stored; deeper (a URL carries 2000 levels): the same 400 as a body.
    const deep = '['.repeat(MAX_JSON_DEPTH) + ']'.repeat(MAX_JSON_DEPTH);
    expect((await post(`${person.id}/update_property/?${q({ key: 'k', value: deep })}`)).status).toBe(200);
    const tooDeep = await post(
      `${person.id}/update_property/?${q({ key: 'k', value: '['.repeat(2000) + ']'.repeat(2000) })}`,
    );
    expect(tooDeep.status).toBe(400);
    expect(tooDeep.body).toMatchObject({ code: 'parse_error', attr: 'value' });
  });
});

describe('delete_property with a query parameter', () => {
  it('removes the property named by $unset and records $delete_person_property', async () => {
    const person = await newPerson('qp4', { secret: 'x', other: 1 });
    const res = await post(`${person.id}/delete_property/?${q({ $unset: 'secret' })}`);
    expect(res.status).toBe(200);
    expect(res.body.success).toBe(true);
    expect(res.body.properties).toEqual(expect.not.objectContaining({ secret: 'x' }));
    expect(res.body.properties.other).toBe(1);
    const [event] = await sql(
      api.orm,
      `select properties from event where project_id = ? and event = '$delete_person_property'`,
      [account.projectId],
    );
    expect(event.properties).toEqual({ $unset: ['secret'] });
  });

  it('still takes the body, and answers 400 attr $unset when neither names a key', async () => {
    const person = await newPerson('qp5', { a: 1, b: 2 });
    expect((await post(`${person.id}/delete_property/`, { $unset: 'a' })).body.properties).not.toHaveProperty('a');
    const missing = await post(`${person.id}/delete_property/`);
    expect(missing.status).toBe(400);
    expect(missing.body).toMatchObject({ type: 'validation_error', attr: '$unset' });
    const blank = await post(`${person.id}/delete_property/?%24unset=`);
    expect(blank.status).toBe(400);
    expect(blank.body.attr).toBe('$unset');
  });
});
