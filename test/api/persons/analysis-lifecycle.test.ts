// Lifecycle buckets by the project's time zone: a day is the project's local day, so events and
// person creation near midnight UTC land on the local date.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../../db.ts';
import { capture } from '../../fixtures.ts';
import { call, createAccount, startApi, type TestAccount, type TestApi } from '../../helpers.ts';

let api: TestApi;
let account: TestAccount;

beforeAll(async () => {
  api = await startApi();
  account = await createAccount(api.orm);
  // UTC−5 in February; set before the first request reads the project.
  await sql(api.orm, `update project set timezone = 'America/New_York' where id = ?`, [account.projectId]);
  await capture(api.baseUrl, account.projectToken, [
    // z1: Feb 9 22:00 and Feb 10 10:00 local (Feb 10 03:00 and 15:00 UTC); created on Feb 9 local.
    { event: 'visit', distinct_id: 'z1', timestamp: '2026-02-10T03:00:00Z' },
    { event: 'visit', distinct_id: 'z1', timestamp: '2026-02-10T15:00:00Z' },
    // z2: Feb 8 07:00 and Feb 10 23:00 local (Feb 11 04:00 UTC).
    { event: 'visit', distinct_id: 'z2', timestamp: '2026-02-08T12:00:00Z' },
    { event: 'visit', distinct_id: 'z2', timestamp: '2026-02-11T04:00:00Z' },
  ]);
});
afterAll(() => api.close());

const bucket = async (date: string, type: string, extra = '') => {
  const res = await call(
    api.baseUrl,
    'GET',
    `/api/projects/${account.projectId}/persons/lifecycle/?target_date=${date}&lifecycle_type=${type}${extra}`,
    { key: account.apiKey },
  );
  expect(res.status).toBe(200);
  expect(res.body.results[0].count).toBe(res.body.results[0].people.length);
  return res.body.results[0].people.map((p: any) => p.distinct_ids[0]).sort();
};

describe('lifecycle persons in the project time zone', () => {
  it('buckets by local days', async () => {
    expect(await bucket('2026-02-09', 'new')).toEqual(['z1']);
    expect(await bucket('2026-02-09', 'dormant')).toEqual(['z2']);
    expect(await bucket('2026-02-10', 'new')).toEqual([]);
    expect(await bucket('2026-02-10', 'returning')).toEqual(['z1']);
    expect(await bucket('2026-02-10', 'resurrecting')).toEqual(['z2']);
    expect(await bucket('2026-02-11', 'dormant')).toEqual(['z1', 'z2']);
  });

  it('counts only the given event as activity', async () => {
    const events = `&events=${encodeURIComponent('[{"id":"other"}]')}`;
    expect(await bucket('2026-02-10', 'returning', events)).toEqual([]);
    expect(await bucket('2026-02-10', 'returning', `&events=${encodeURIComponent('[{"id":"visit"}]')}`)).toEqual([
      'z1',
    ]);
  });
});
