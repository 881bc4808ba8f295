// The CSV export's header is exactly the columns the exported persons have (PostHog's flattening): checked
// against the JSON list after each kind of write that adds or removes a column. Guards for the export's
// header; they passed before this file was added too (a column list kept by triggers was tried and dropped
// for its ingestion cost, and these stay to hold any later header shortcut to the same answer).
import { describe, expect, it } from 'vitest';
import { capture } from '../../fixtures.ts';
import { apiWithAccount, call, eventually } from '../../helpers.ts';

const { api, account } = await apiWithAccount();
const P = `/api/projects/${account.projectId}/persons`;
const at = (minute: number) => `2026-03-02T10:${String(minute).padStart(2, '0')}:00Z`;

/** The property and distinct-id columns of a CSV export (the fixed person columns left out). */
async function exportedColumns(query = ''): Promise<string[]> {
  const res = await call(api.baseUrl, 'GET', `${P}/?format=csv${query}`, { key: account.apiKey });
  expect(res.status, res.text).toBe(200);
  const header = res.text.slice(0, res.text.indexOf('\r\n')).split(',');
  return header.filter((column) => /^(properties|distinct_ids)\./.test(column));
}

/** The same columns computed from the JSON list: every leaf path of every person, every distinct id position. */
async function columnsOfPersons(query = ''): Promise<string[]> {
  const res = await call(api.baseUrl, 'GET', `${P}/?limit=1000${query}`, { key: account.apiKey });
  expect(res.status, res.text).toBe(200);
  const columns = new Set<string>();
  const walk = (value: unknown, path: string) => {
    if (value && typeof value === 'object') for (const [k, v] of Object.entries(value)) walk(v, `${path}.${k}`);
    else columns.add(path);
  };
  for (const person of res.body.results) {
    walk(person.properties, 'properties');
    for (let i = 0; i < person.distinct_ids.length; i++) columns.add(`distinct_ids.${i}`);
  }
  return [...columns].sort();
}

async function expectExactHeader() {
  const expected = await columnsOfPersons();
  expect(await exportedColumns()).toEqual(expected);
  return expected;
}

const personOf = async (distinctId: string) =>
  (await call(api.baseUrl, 'GET', `${P}/?distinct_id=${distinctId}`, { key: account.apiKey })).body.results[0];

await capture(api.baseUrl, account.projectToken, [
  { event: 'e', distinct_id: 'ada', timestamp: at(1), properties: { $set: { email: 'ada@x.com', shared: 1 } } },
  {
    event: 'e',
    distinct_id: 'bob',
    timestamp: at(2),
    properties: { $set: { email: 'bob@x.com', shared: 2, only_bob: { deep: [1, { x: 2 }] }, temp: 't' } },
  },
  { event: 'e', distinct_id: 'cy', timestamp: at(3), properties: { $set: { email: 'cy@x.com', cy_only: true } } },
  { event: 'e', distinct_id: 'cy-2', timestamp: at(4) },
  { event: '$identify', distinct_id: 'cy', timestamp: at(5), properties: { $anon_distinct_id: 'cy-2' } },
  { event: '$identify', distinct_id: 'cy', timestamp: at(6), properties: { $anon_distinct_id: 'cy-3' } },
]);

describe('CSV header', () => {
  it('holds every column the persons have, nested and list paths and distinct id positions included', async () => {
    const columns = await expectExactHeader();
    expect(columns).toEqual(
      expect.arrayContaining([
        'properties.only_bob.deep.0',
        'properties.only_bob.deep.1.x',
        'properties.cy_only',
        'distinct_ids.2',
      ]),
    );
    expect(columns).not.toContain('distinct_ids.3');
  });

  it('drops a column when its only holder loses it ($unset through delete_property)', async () => {
    const bob = await personOf('bob');
    const res = await call(api.baseUrl, 'POST', `${P}/${bob.id}/delete_property/`, {
      key: account.apiKey,
      body: { $unset: 'temp' },
    });
    expect(res.status, res.text).toBe(200);
    await eventually(async () => !(await personOf('bob')).properties.temp);
    expect(await expectExactHeader()).not.toContain('properties.temp');
  });

  it('drops the columns of a deleted person that nobody else has, keeps the shared ones', async () => {
    const bob = await personOf('bob');
    const res = await call(api.baseUrl, 'DELETE', `${P}/${bob.id}/`, { key: account.apiKey });
    expect(res.status, res.text).toBe(204);
    const columns = await expectExactHeader();
    expect(columns).not.toContain('properties.only_bob.deep.0');
    expect(columns).toEqual(expect.arrayContaining(['properties.shared', 'properties.email']));
  });

  it('narrows the distinct id columns when a split leaves every person with one id', async () => {
    const cy = await personOf('cy');
    const res = await call(api.baseUrl, 'POST', `${P}/${cy.id}/split/`, { key: account.apiKey, body: {} });
    expect(res.status, res.text).toBe(200);
    const columns = await expectExactHeader();
    expect(columns.filter((c) => c.startsWith('distinct_ids.'))).toEqual(['distinct_ids.0']);
  });

  it('a filtered export has the columns of the persons it matches, not the whole project’s', async () => {
    const columns = await exportedColumns('&search=ada@x.com');
    expect(columns).toEqual(await columnsOfPersons('&search=ada@x.com'));
    expect(columns).not.toContain('properties.cy_only');
  });
});
