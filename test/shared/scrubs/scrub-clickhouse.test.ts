// Scrubs with EVENT_STORE=clickhouse (chDB): the matching events are deleted or stripped in
// PostgreSQL (the buffer) and in ClickHouse (one statement), events only ClickHouse holds (trimmed
// from the buffer) included; a dry run's counts per store equal what the scrub changes, the receipt
// cites both stores, and events received after the cutoff are left alone in both.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import type { ClickHouseEventStore } from '../../../shared/events/clickhouse.ts';
import type { EventStore } from '../../../shared/events/index.ts';
import { runScrub } from '../../../shared/scrubs/index.ts';
import type { WorkerDeps } from '../../../worker/deps.ts';
import { sql } from '../../db.ts';
import { createAccount, type TestAccount } from '../../helpers.ts';
import { clickHouseWorld } from '../../clickhouse.ts';

let orm: MikroORM;
let ch: ClickHouseEventStore;
let events: EventStore;
let deps: WorkerDeps;
let account: TestAccount;
beforeAll(async () => {
  // Delete statements of 2 rows: several of them.
  ({ orm, ch, events, deps } = await clickHouseWorld('scrub', { deleteChunk: 2 }));
  account = await createAccount(orm);
});
afterAll(() => orm?.close());

const AT = '2025-05-01 10:00:00+00';
const pgTime = async (at: string) =>
  (
    await sql<{ t: string }>(
      orm,
      `select to_char(?::timestamptz at time zone 'UTC', 'YYYY-MM-DD HH24:MI:SS.US') as t`,
      [at],
    )
  )[0].t;

/** An event in ClickHouse, and also in PostgreSQL's buffer unless `trimmed`. */
async function store(
  e: { event: string; distinctId: string; properties: Record<string, unknown>; at?: string; arrived?: string },
  where: 'both' | 'trimmed' | 'postgres' = 'both',
) {
  const uuid = randomUUID();
  const at = e.at ?? AT;
  const arrived = e.arrived ?? at;
  if (where !== 'trimmed')
    await sql(
      orm,
      `insert into event (uuid, project_id, event, distinct_id, timestamp, created_at, properties) values (?, ?, ?, ?, ?, ?, ?::jsonb)`,
      [uuid, account.projectId, e.event, e.distinctId, at, arrived, JSON.stringify(e.properties)],
    );
  if (where !== 'postgres')
    await ch.insertRows([
      {
        uuid,
        project_id: account.projectId,
        event: e.event,
        distinct_id: e.distinctId,
        person_id: null,
        properties: JSON.stringify(e.properties),
        timestamp: await pgTime(at),
        created_at: await pgTime(arrived),
      },
    ]);
  return uuid;
}

async function scrubRow(filter: Record<string, unknown>, action: string, cutoff = '2025-06-01 00:00:00+00') {
  const [{ id }] = await sql<{ id: string }>(
    orm,
    `insert into event_scrub (project_id, target, action, mode, filter, cutoff, run_after)
     values (?, 'events', ?, 'now', ?::jsonb, ?, now()) returning id::text`,
    [
      account.projectId,
      action,
      JSON.stringify({
        event: null,
        properties: [],
        after: '2025-04-01T00:00:00.000Z',
        before: '2025-06-01T00:00:00.000Z',
        distinct_ids: null,
        keys: null,
        ...filter,
      }),
      cutoff,
    ],
  );
  return id;
}
const run = (id: string) =>
  runScrub({ id: 'direct', data: { scrubId: id }, updateProgress: async () => undefined } as any, deps);
const row = async (id: string) => (await sql<any>(orm, `select * from event_scrub where id = ?`, [id]))[0];

const chEvents = async (distinctId: string) => {
  const r = await ch.client.query({
    query: `SELECT event, properties FROM ${ch.database}.events FINAL WHERE project_id = {p:Int64} AND distinct_id = {d:String} ORDER BY JSONExtractInt(properties, 'i')`,
    query_params: { p: account.projectId, d: distinctId },
    format: 'JSONEachRow',
  });
  return (await r.json<{ event: string; properties: string }>()).map((x) => ({
    event: x.event,
    properties: JSON.parse(x.properties),
  }));
};
const pgEvents = async (distinctId: string) =>
  sql<{ event: string; properties: Record<string, unknown> }>(
    orm,
    `select event, properties from event where project_id = ? and distinct_id = ? order by (properties->>'i')::int`,
    [account.projectId, distinctId],
  );

describe('scrubs with EVENT_STORE=clickhouse', () => {
  it("delete: the dry-run counts per store equal what it deletes, in both stores and ClickHouse's trimmed events too", async () => {
    const d = 'ch-scrub-del';
    await store({ event: 'pay', distinctId: d, properties: { i: 1, card: 'x' } });
    await store({ event: 'pay', distinctId: d, properties: { i: 2, card: 'x' } });
    await store({ event: 'pay', distinctId: d, properties: { i: 3, card: 'x' } }, 'trimmed');
    await store({ event: 'pay', distinctId: d, properties: { i: 4, card: 'x' } }, 'postgres'); // not shipped yet
    await store({ event: 'pay', distinctId: d, properties: { i: 5, card: 'y' } }); // another value
    await store({ event: 'pay', distinctId: d, properties: { i: 6, card: 'x' }, at: '2025-03-01 00:00:00+00' }); // before the range
    await store({ event: 'pay', distinctId: d, properties: { i: 7, card: 'x' }, arrived: '2025-06-02 00:00:00+00' }); // after the cutoff
    const filter = {
      event: 'pay',
      properties: [{ key: 'card', value: 'x', operator: 'exact', type: 'event' }],
      distinct_ids: [d],
    };
    const dry = await events.scrubEventCounts(account.projectId, {
      event: 'pay',
      properties: filter.properties,
      after: new Date('2025-04-01T00:00:00Z'),
      before: new Date('2025-06-01T00:00:00Z'),
      distinctIds: [d],
      cutoff: '2025-06-01T00:00:00Z',
    });
    expect(dry).toEqual({ postgres: 3, clickhouse: 3 });
    const id = await scrubRow(filter, 'delete');
    expect(await run(id)).toEqual({ changed: dry });
    const done = await row(id);
    expect(done.status).toBe('completed');
    expect(done.counts_before).toEqual(dry);
    expect(done.rows_changed).toEqual(dry);
    expect(done.counts_after).toEqual({ postgres: 0, clickhouse: 0 });
    expect(done.receipt.stores).toEqual({ postgres: { before: 3, after: 0 }, clickhouse: { before: 3, after: 0 } });
    expect((await pgEvents(d)).map((e) => e.properties.i)).toEqual([5, 6, 7]);
    expect((await chEvents(d)).map((e) => e.properties.i)).toEqual([5, 6, 7]);
  });

  it('strip_properties removes only the keys in both stores; the other members stay as they were', async () => {
    const d = 'ch-scrub-strip';
    await store({ event: 'form', distinctId: d, properties: { i: 1, email: 'a@x', n: 1.5, o: { a: [1] }, s: 'q"t' } });
    await store({ event: 'form', distinctId: d, properties: { i: 2, phone: '1', keep: true } }, 'trimmed');
    await store({ event: 'form', distinctId: d, properties: { i: 3, keep: true } });
    await store({ event: 'view', distinctId: d, properties: { i: 4, email: 'b@x' } });
    const id = await scrubRow({ event: 'form', distinct_ids: [d], keys: ['email', 'phone'] }, 'strip_properties');
    await run(id);
    const done = await row(id);
    expect(done.status).toBe('completed');
    expect(done.counts_before).toEqual({ postgres: 1, clickhouse: 2 });
    expect(done.counts_after).toEqual({ postgres: 0, clickhouse: 0 });
    const expected = [
      { event: 'form', properties: { i: 1, n: 1.5, o: { a: [1] }, s: 'q"t' } },
      { event: 'form', properties: { i: 2, keep: true } },
      { event: 'form', properties: { i: 3, keep: true } },
      { event: 'view', properties: { i: 4, email: 'b@x' } },
    ];
    expect(await chEvents(d)).toEqual(expected);
    expect(await pgEvents(d)).toEqual(expected.filter((e) => e.properties.i !== 2));
  });
});
