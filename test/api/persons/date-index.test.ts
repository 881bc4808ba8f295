// Date filters through a `property index --kind date` (shared/persons/property-indexes.ts): ISO dates are
// read by iso_timestamp_utc, which must agree with try_timestamptz wherever it answers; everything else
// set under the key is read by try_timestamptz, as before. Pinned here: that agreement over every
// combination of ISO parts (valid and not), the answers with and without the index, the plans, and that
// a session whose zone is not UTC keeps to try_timestamptz.
import type { EntityManager } from '@mikro-orm/postgresql';
import { afterAll, describe, expect, it } from 'vitest';
import { rows } from '../../../shared/platform/db/sql.ts';
import {
  dateIndexedKeys,
  dropPersonPropertyIndexes,
  indexPersonProperty,
} from '../../../shared/persons/property-indexes.ts';
import { sql } from '../../db.ts';
import { apiWithAccount, call } from '../../helpers.ts';
import { listPlan } from './list-plan.ts';

const { api, account } = await apiWithAccount();
// A key of this file's own: the indexes are on the whole person table.
const KEY = `seen-${account.projectId}`;
const em = () => api.orm.em.fork() as EntityManager;
afterAll(() => dropPersonPropertyIndexes(em(), KEY));

// What persons hold under the key: ISO dates in every form the index reads, and what only
// try_timestamptz reads (other layouts, hour 24) or nothing reads.
const held: Record<string, unknown> = {
  dateOnly: '2024-03-05',
  utc: '2024-03-05T10:20:30Z',
  offset: '2024-03-05T23:30:00-05:00', // 2024-03-06 04:30 UTC
  zoneless: '2024-03-05 10:00',
  micro: '2024-03-04T23:59:59.999999+00:00',
  compactOffset: '2024-03-05T12:00:01+0100', // 11:00:01 UTC
  words: 'March 5 2024',
  slashes: '2024/03/06',
  hour24: '2024-03-05T24:00:00', // 2024-03-06 00:00
  february30: '2024-02-30',
  junk: 'abc',
  number: 5,
  flag: true,
  nested: { at: '2024-03-05' }, // its text, {"at": "2024-03-05"}, reads as 2024-03-05 to PostgreSQL
  nothing: null,
};

await sql(
  api.orm,
  `insert into person (uuid, project_id, properties)
   select gen_random_uuid(), ?, jsonb_build_object('name', name) || jsonb_build_object(?::text, value)
     from jsonb_each(?::jsonb) as held(name, value)`,
  [account.projectId, KEY, JSON.stringify(held)],
);
// Persons without the key, and many with ISO dates of 2023, so the indexes are worth reading.
await sql(
  api.orm,
  `insert into person (uuid, project_id, properties)
   select gen_random_uuid(), ?, case when g % 2 = 0 then jsonb_build_object('name', 'filler')
     else jsonb_build_object('name', 'filler', ?::text, '2023-01-01T00:00:00Z'::timestamptz + make_interval(hours => g)) end
     from generate_series(1, 2000) g`,
  [account.projectId, KEY],
);
await sql(api.orm, 'analyze person');

/** The names of the persons (fillers left out) the filter matches, over HTTP. */
async function names(filter: unknown[]): Promise<string[]> {
  const q = encodeURIComponent(JSON.stringify([...filter, { key: 'name', value: 'filler', operator: 'is_not' }]));
  const res = await call(api.baseUrl, 'GET', `/api/projects/${account.projectId}/persons/?limit=1000&properties=${q}`, {
    key: account.apiKey,
  });
  expect(res.status, res.text).toBe(200);
  return res.body.results.map((p: { properties: { name: string } }) => p.properties.name).sort();
}

/** The plan of the list's page query for this filter in a session of the given zone. */
const planOf = (filter: unknown[], zone = 'UTC') => listPlan(em(), account.projectId, filter, [`timezone = '${zone}'`]);

const filters = {
  before: [{ key: KEY, value: '2024-03-05T12:00:00Z', operator: 'is_date_before' }],
  after: [{ key: KEY, value: '2024-03-05T12:00:00Z', operator: 'is_date_after' }],
  exact5: [{ key: KEY, value: '2024-03-05', operator: 'is_date_exact' }],
  exact6: [{ key: KEY, value: '2024-03-06', operator: 'is_date_exact' }],
  beforeNothing: [{ key: KEY, value: '1990-01-01', operator: 'is_date_before' }],
  afterNothing: [{ key: KEY, value: '2100-01-01', operator: 'is_date_after' }],
};

describe('date property index', () => {
  it('reads every ISO date as PostgreSQL does in a UTC session, and answers null for the rest, never an error', async () => {
    const [checked] = await em().transactional(async (tx) => {
      await tx.getConnection().execute(`set local timezone = 'UTC'`, [], 'run', tx.getTransactionContext());
      return rows<{ strings: string; read: string; differ: string }>(
        tx,
        `with parts as (
           select y || '-' || m || '-' || d || t || z as s
             from unnest(array['0000', '0001', '1999', '2024', '9999']) y,
                  unnest(array['00', '01', '02', '04', '12', '13', '1']) m,
                  unnest(array['00', '01', '28', '29', '30', '31', '32']) d,
                  unnest(array['', 'T00:00', ' 23:59:59', 'T24:00:00', 'T12:30:60', 'T10:20:30.5', 'T10:20:30.123456',
                               'T10:20:30.1234567', 'T25:00', 't10:20']) t,
                  unnest(array['', 'Z', '+00:00', '-14:00', '+1400', '+15:00', '+05', '-00:30', '+16:00', 'z']) z)
         select count(*) as strings, count(iso_timestamp_utc(s)) as read,
                count(*) filter (where iso_timestamp_utc(s) is distinct from try_timestamptz(s)
                                   and iso_timestamp_utc(s) is not null) as differ
           from parts`,
      );
    });
    expect(Number(checked.strings)).toBe(5 * 7 * 7 * 10 * 10);
    expect(Number(checked.read)).toBeGreaterThan(1500); // the valid combinations are read, not refused
    expect(Number(checked.differ)).toBe(0);
  });

  it('serves every date operator, matching or not, with the answers it gave without the index', async () => {
    const expected = {
      before: ['compactOffset', 'dateOnly', 'micro', 'nested', 'utc', 'words', 'zoneless'],
      after: ['hour24', 'offset', 'slashes'],
      exact5: ['compactOffset', 'dateOnly', 'nested', 'utc', 'words', 'zoneless'],
      exact6: ['hour24', 'offset', 'slashes'],
      beforeNothing: [],
      afterNothing: [],
    };
    const without = Object.fromEntries(
      await Promise.all(Object.entries(filters).map(async ([name, filter]) => [name, await names(filter)])),
    );
    expect(without).toEqual(expected);

    const made = await indexPersonProperty(em(), KEY, ['date']);
    expect(made.map(({ kind, valid }) => ({ kind, valid }))).toEqual([
      { kind: 'date', valid: true },
      { kind: 'date', valid: true },
    ]);
    await sql(api.orm, 'analyze person');
    expect(await dateIndexedKeys(em())).toContain(KEY);
    for (const [name, filter] of Object.entries(filters)) {
      // `before` matches the 1000 fillers too: walking the project newest first is the better plan there.
      if (name !== 'before') {
        const plan = await planOf(filter);
        for (const index of made) expect(plan, name).toContain(index.name);
      }
      expect(await names(filter), name).toEqual(expected[name as keyof typeof expected]);
    }
  });

  it('is dropped with its statistics', async () => {
    await indexPersonProperty(em(), KEY, ['date']);
    const statistics = async () =>
      (
        await rows<{ expression: string }>(
          em(),
          `select expr as expression from pg_stats_ext_exprs where tablename = 'person'`,
        )
      )
        .map((row) => row.expression)
        .filter((expression) => expression.includes(KEY));
    expect(await statistics()).toHaveLength(2); // the dates and the odd values, filled in by the build's ANALYZE
    expect(await dropPersonPropertyIndexes(em(), KEY)).toHaveLength(2);
    expect(await statistics()).toEqual([]);
    expect(await dateIndexedKeys(em())).not.toContain(KEY);
  });

  it('is not read by a session whose zone is not UTC (a date without a zone is read in that zone)', async () => {
    await indexPersonProperty(em(), KEY, ['date']);
    // The same filter in a UTC session reads the index, so the zone is what keeps it out below.
    expect(await planOf(filters.beforeNothing)).toContain('person_property_date');
    const plan = await planOf(filters.beforeNothing, 'America/New_York');
    expect(plan).not.toContain('person_property_date');
    expect(plan).toContain('try_timestamptz');
  });
});
