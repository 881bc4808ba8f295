// The shipper copies PostgreSQL's new events and distinct-id changes to ClickHouse (chDB): in
// batches, only settled events, idempotently (a batch sent again is dropped), one shipper at a time;
// after shipping, both stores give the same answers, merges and deleted persons included.
import { randomUUID } from 'node:crypto';
import type { EntityManager, MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { initOrm } from '../../../shared/platform/db/orm.ts';
import { rows, run } from '../../../shared/platform/db/sql.ts';
import { createClickHouseEventStore, type ClickHouseEventStore } from '../../../shared/events/clickhouse.ts';
import type { EventRow, EventStore, FunnelParams } from '../../../shared/events/event-store.ts';
import { createPostgresEventStore } from '../../../shared/events/postgres.ts';
import { batchStatement, indexOrdered, shipEvents, shippingLag } from '../../../shared/events/shipper.ts';
import { storeEvents } from '../../../shared/events/store.ts';
import { createAccount, ownDatabase } from '../../helpers.ts';
import { chdbClient, chdbDatabase } from '../../clickhouse.ts';
import { insertPerson } from './persons.ts';

// A database of its own: the shipment mark and the outbox triggers are database-wide.
let orm: MikroORM;
let pg: EventStore;
let ch: ClickHouseEventStore;
let projectId: number;
const em = () => orm.em.fork() as EntityManager;
const T0 = Date.parse('2026-05-04T10:00:00.000Z');
const funnel: FunnelParams = {
  steps: ['signup', 'pay'],
  from: new Date(T0 - 86_400_000),
  to: new Date(T0 + 86_400_000),
  windowDays: 7,
};
const options = { batchSize: 2, settleSeconds: 30 };
const minutesAgo = (m: number) => new Date(Date.now() - m * 60_000);
const person = (...distinctIds: string[]) => insertPerson(em(), projectId, distinctIds);

const event = (name: string, distinctId: string, personUuid: string | null, ms: number): EventRow => ({
  uuid: randomUUID(),
  projectId,
  event: name,
  distinctId,
  personId: personUuid,
  properties: { n: ms },
  timestamp: new Date(T0 + ms),
});

/** Rows physically in ClickHouse (a batch inserted twice would show here before any merge). */
async function physicalRows() {
  const result = await ch.client.query({
    query: `SELECT count() AS n FROM ${ch.database}.events`,
    format: 'JSONEachRow',
  });
  return Number((await result.json<{ n: string }>())[0].n);
}

/** The funnel's persons, the same from both stores (and so are behavioural cohorts' persons). */
async function sameFunnel() {
  const answers = async (store: EventStore) =>
    Promise.all([1, 2, -2].map((step) => store.funnelPersonIds(projectId, funnel, step, { limit: 100, offset: 0 })));
  const fromPg = await answers(pg);
  expect(await answers(ch)).toEqual(fromPg);
  const since = funnel.from;
  const performers = async (store: EventStore) =>
    Promise.all([
      store.performedEventPersonIds(projectId, { event: 'pay', since, times: 1, eventFilters: [] }),
      store.performedEventPersonIds(projectId, { event: 'signup', since, times: 2, eventFilters: [] }),
      // The properties as PostgreSQL's jsonb wrote them, read by ClickHouse's filters (the young,
      // unshipped pay is A's at 3000).
      ...[
        { key: 'n', operator: 'exact', value: '2000' },
        { key: 'n', operator: 'lt', value: 1500 },
      ].map((filter) =>
        store.performedEventPersonIds(projectId, { event: 'pay', since, times: 1, eventFilters: [filter] }),
      ),
    ]);
  expect(await performers(ch)).toEqual(await performers(pg));
  return fromPg.map((a) => a.personIds);
}

/** PostgreSQL's mapping now, as the mirror should hold it: each distinct id's person and its creation (UTC, microseconds). */
async function mappingsInPostgres() {
  const found = await rows<{ distinct_id: string; person_id: string; created_at: string }>(
    em(),
    `select d.distinct_id, d.person_id::text as person_id,
            to_char(p.created_at at time zone 'UTC', 'YYYY-MM-DD HH24:MI:SS.US') as created_at
       from person_distinct_id d join person p on p.id = d.person_id where d.project_id = ?`,
    [projectId],
  );
  return new Map(found.map((r) => [r.distinct_id, { personId: r.person_id, createdAt: r.created_at }]));
}

/** Each lifecycle bucket's persons on the funnel's first day (T0's), the same from both stores. */
async function sameLifecycle() {
  const answers = async (store: EventStore) => {
    const found: Record<string, string[]> = {};
    for (const type of ['new', 'returning', 'resurrecting', 'dormant'] as const)
      found[type] = (
        await store.lifecyclePersonIds(
          projectId,
          { day: new Date(T0), type, event: null, timezone: 'UTC' },
          { limit: 100, offset: 0 },
        )
      ).personIds;
    return found;
  };
  const fromPg = await answers(pg);
  expect(await answers(ch)).toEqual(fromPg);
  return fromPg;
}

beforeAll(async () => {
  orm = await initOrm(await ownDatabase('event_shipper'), 3);
  projectId = (await createAccount(orm)).projectId;
  pg = createPostgresEventStore(orm, { deleteChunk: 1000 });
  ch = createClickHouseEventStore(chdbClient(), chdbDatabase('shipper'), orm);
  await ch.migrate();
});

afterAll(async () => {
  await orm.close();
});

describe('shipping events to ClickHouse', () => {
  let A: { id: string; uuid: string };
  let B: typeof A;

  it('ships settled events in batches with the distinct ids mirrored; young ones wait', async () => {
    A = await person('a');
    B = await person('b');
    await storeEvents(
      em(),
      [event('signup', 'a', A.uuid, 0), event('pay', 'a', A.uuid, 1000), event('signup', 'b', B.uuid, 0)],
      minutesAgo(5),
    );
    await storeEvents(em(), [event('signup', 'anon', null, 10), event('pay', 'b', B.uuid, 2000)], minutesAgo(2));
    const young = event('pay', 'a', A.uuid, 3000);
    await storeEvents(em(), [young], new Date());

    const first = await shipEvents(orm, ch, options);
    expect(first).toMatchObject({ skipped: false, events: 5, batches: 3, distinctIds: 2 });
    expect(first.lagSeconds).toBeGreaterThan(0); // the young event waits
    expect(await ch.countEvents(projectId)).toBe(5);
    expect(await pg.countEvents(projectId)).toBe(6);
    expect(await sameFunnel()).toEqual([[B.id, A.id], [B.id, A.id], []]);

    const second = await shipEvents(orm, ch, { ...options, settleSeconds: 0 });
    expect(second).toMatchObject({ events: 1, batches: 1, distinctIds: 0, lagSeconds: 0 });
    expect(await ch.countEvents(projectId)).toBe(6);
    expect(await shippingLag(em())).toBe(0);
  });

  it('sends nothing twice: a run that dies after ClickHouse took a batch re-sends that same batch, dropped', async () => {
    // Merges would fold a doubled row away in the background and hide it from this count.
    await ch.client.command({ query: `SYSTEM STOP MERGES ${ch.database}.events` });
    expect(await physicalRows()).toBe(6);
    await storeEvents(em(), [event('signup', 'b', B.uuid, 20)], new Date()); // a batch of one
    let sent = 0;
    const dying: ClickHouseEventStore = {
      ...ch,
      insertRows: async (values, token) => {
        await ch.insertRows(values, token);
        sent += values.length;
        throw new Error('worker killed before the mark moved');
      },
    };
    await expect(shipEvents(orm, dying, { ...options, settleSeconds: 0 })).rejects.toThrow('worker killed');
    expect([sent, await physicalRows()]).toEqual([1, 7]);
    // Meanwhile more events arrive; the retry still sends exactly the pending batch of one first.
    await storeEvents(em(), [event('pay', 'b', B.uuid, 30), event('pageview', 'b', B.uuid, 40)], new Date());
    const retry = await shipEvents(orm, ch, { ...options, settleSeconds: 0 });
    expect(retry).toMatchObject({ events: 3, batches: 2 });
    expect(await physicalRows()).toBe(9);
    expect(await ch.countEvents(projectId)).toBe(await pg.countEvents(projectId));
  });

  it('mirrors merges and deleted persons made after the events were shipped', async () => {
    // 'anon' is aliased to B; then A merges into B; then B is deleted.
    await run(em(), `insert into person_distinct_id (project_id, person_id, distinct_id) values (?, ?, 'anon')`, [
      projectId,
      B.id,
    ]);
    expect((await shipEvents(orm, ch, options)).distinctIds).toBe(1);
    await run(em(), `update person_distinct_id set person_id = ? where person_id = ?`, [B.id, A.id]);
    // As a merge does, the survivor keeps the older creation (as if A had been made a month before
    // T0): B, active on T0's day only, turns from no bucket that day to resurrecting; the mirror
    // carries the creation for every one of B's distinct ids.
    await run(em(), `update person set created_at = ? where id = ?`, [new Date(T0 - 30 * 86_400_000), B.id]);
    await run(em(), `delete from person where id = ?`, [A.id]);
    expect((await shipEvents(orm, ch, options)).distinctIds).toBe(3);
    expect(await ch.distinctIdMappings(projectId)).toEqual(await mappingsInPostgres());
    expect(await sameFunnel()).toEqual([[B.id], [B.id], []]);
    expect(await sameLifecycle()).toEqual({ new: [], returning: [], resurrecting: [B.id], dormant: [] });
    await run(em(), `delete from person where id = ?`, [B.id]);
    expect((await shipEvents(orm, ch, options)).distinctIds).toBe(3);
    expect(await sameFunnel()).toEqual([[], [], []]);
    expect(await ch.distinctIdMappings(projectId)).toEqual(new Map());
    const [{ n }] = await rows<{ n: number }>(em(), `select count(*)::int as n from person_distinct_id_change`);
    expect(n).toBe(0);
  });

  it('ships many events of one created_at exactly once, each batch read in index order from the mark', async () => {
    const before = await physicalRows();
    const tied = await person('tied');
    const arrived = new Date();
    const events = Array.from({ length: 600 }, (_, i) => event('pageview', 'tied', tied.uuid, 100 + i));
    await storeEvents(em(), events, arrived);
    await run(em(), `analyze event`); // the planner sees the tie
    // Two runs of batches of 7: the first stops inside the tie, the second resumes from its mark there.
    const first = await shipEvents(orm, ch, { batchSize: 7, settleSeconds: 0, maxBatches: 40 });
    expect(first).toMatchObject({ events: 280, batches: 40 });
    const second = await shipEvents(orm, ch, { batchSize: 7, settleSeconds: 0 });
    expect(second).toMatchObject({ events: 320, batches: 46, lagSeconds: 0 });
    expect(await physicalRows()).toBe(before + 600);
    const shipped = await ch.client.query({
      query: `SELECT uuid, count() AS n FROM ${ch.database}.events WHERE distinct_id = 'tied' GROUP BY uuid HAVING n = 1`,
      format: 'JSONEachRow',
    });
    expect((await shipped.json<{ uuid: string }>()).map((r) => r.uuid).sort()).toEqual(
      events.map((e) => e.uuid).sort(),
    );

    // A batch's read from a mark inside the tie walks event_created_idx in order to its limit: no
    // sort of the rows past the mark (which the planner, expecting one row there, would choose).
    const [inside] = await rows<{ created_at: string; uuid: string }>(
      em(),
      `select created_at::text as created_at, uuid::text as uuid from event where distinct_id = 'tied'
        order by created_at, uuid offset 100 limit 1`,
    );
    const mark = { ...inside, pending_created_at: null, pending_uuid: null, distinct_ids_mirrored: true };
    const statement = batchStatement(mark, { batchSize: 7, settleSeconds: 0 });
    const plan = await em().transactional(async (tx) => {
      await indexOrdered(tx);
      const [row] = await rows<{ 'QUERY PLAN': unknown }>(
        tx,
        `explain (format json) ${statement.sql}`,
        statement.params,
      );
      return JSON.stringify(row['QUERY PLAN']);
    });
    expect(plan).not.toContain('"Node Type":"Sort"');
    expect(plan).toContain('created_at_uuid_idx');
  });

  it('runs one shipper at a time: a second one skips', async () => {
    await em().transactional(async (tx) => {
      await rows(tx, `select 1 from event_shipment for update`);
      expect(await shipEvents(orm, ch, options)).toMatchObject({ skipped: true, events: 0 });
    });
  });
});
