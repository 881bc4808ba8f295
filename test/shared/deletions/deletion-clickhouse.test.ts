// The deletion job with EVENT_STORE=clickhouse: a batch of requests deletes the persons' events from
// PostgreSQL (the source) and from ClickHouse (chDB, one DELETE for the batch), each bounded by its
// request's cutoff to the microsecond; the rows are counted once and the requests complete.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import type { ClickHouseEventStore } from '../../../shared/events/clickhouse.ts';
import { deletePersonData } from '../../../shared/deletions/job.ts';
import type { WorkerDeps } from '../../../worker/deps.ts';
import { sql } from '../../db.ts';
import { createAccount, type TestAccount } from '../../helpers.ts';
import { clickHouseWorld } from '../../clickhouse.ts';

const CUTOFFS = ['2024-01-02 03:04:05.123456+00', '2024-03-04 05:06:07.000001+00'];

let orm: MikroORM;
let ch: ClickHouseEventStore;
let deps: WorkerDeps;
let account: TestAccount;
beforeAll(async () => {
  ({ orm, ch, deps } = await clickHouseWorld('deletion'));
  account = await createAccount(orm);
});
afterAll(() => orm?.close());

/** The same event in PostgreSQL and (as the shipper copies it) in ClickHouse; `at` is event time and arrival. */
async function both(distinctId: string, person: string, at: string) {
  const uuid = randomUUID();
  await sql(
    orm,
    `insert into event (uuid, project_id, event, distinct_id, person_id, timestamp, created_at) values (?, ?, 'e', ?, ?, ?, ?)`,
    [uuid, account.projectId, distinctId, person, at, at],
  );
  const [{ t }] = await sql<{ t: string }>(
    orm,
    `select to_char(?::timestamptz at time zone 'UTC', 'YYYY-MM-DD HH24:MI:SS.US') as t`,
    [at],
  );
  await ch.insertRows([
    {
      uuid,
      project_id: account.projectId,
      event: 'e',
      distinct_id: distinctId,
      person_id: person,
      properties: '{}',
      timestamp: t,
      created_at: t,
    },
  ]);
}

const request = async (person: string, distinctId: string, cutoff: string) =>
  (
    await sql<{ id: string }>(
      orm,
      `insert into async_deletion (project_id, deletion_type, key, mode, distinct_ids, cutoff, released_at)
       values (?, 'person_events', ?, 'weekly', ?::text[], ?, now()) returning id::text`,
      [account.projectId, person, `{${distinctId}}`, cutoff],
    )
  )[0].id;

describe('event deletion with EVENT_STORE=clickhouse', () => {
  it('deletes a batch from both stores, each request up to its own cutoff, counting each event once', async () => {
    const [p1, p2] = [randomUUID(), randomUUID()];
    await both('ch-del-1', p1, '2024-01-02 03:04:05.1234+00'); // before cutoff 1, in its last millisecond
    await both('ch-del-1', p1, '2024-01-02 03:04:05.123457+00'); // after it: kept
    await both('ch-del-2', p2, '2024-01-01 00:00:00+00');
    await both('ch-del-2', p2, '2024-03-04 05:06:07+00'); // before cutoff 2
    await both('ch-del-2', p2, '2024-03-04 05:06:07.000002+00'); // after it: kept
    const first = await request(p1, 'ch-del-1', CUTOFFS[0]);
    const second = await request(p2, 'ch-del-2', CUTOFFS[1]);
    const result = await deletePersonData(
      { id: 'direct', data: { deletionId: first }, updateProgress: async () => undefined } as any,
      deps,
    );
    expect(result).toEqual({ deleted: 3, requests: 2 });
    const rowsDeleted = await sql<{ id: string; rows_deleted: number; done: boolean }>(
      orm,
      `select id::text, rows_deleted::int, delete_verified_at is not null as done from async_deletion where id in (?, ?) order by id`,
      [first, second],
    );
    expect(rowsDeleted).toEqual([
      { id: first, rows_deleted: 3, done: true },
      { id: second, rows_deleted: 0, done: true },
    ]);
    const left = async (distinctId: string) => {
      const r = await ch.client.query({
        query: `SELECT toString(timestamp) AS t FROM ${ch.database}.events WHERE distinct_id = {d:String} ORDER BY timestamp`,
        query_params: { d: distinctId },
        format: 'JSONEachRow',
      });
      return (await r.json<{ t: string }>()).map((x) => x.t);
    };
    expect(await left('ch-del-1')).toEqual(['2024-01-02 03:04:05.123457']);
    expect(await left('ch-del-2')).toEqual(['2024-03-04 05:06:07.000002']);
    const [pgLeft] = await sql<{ n: number }>(
      orm,
      `select count(*)::int as n from event where project_id = ? and distinct_id in ('ch-del-1', 'ch-del-2')`,
      [account.projectId],
    );
    expect(pgLeft.n).toBe(2);
  });
});
