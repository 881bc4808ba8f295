// PostgreSQL as a buffer with EVENT_STORE=clickhouse (shared/events/buffer.ts): shipped events older
// than the buffer leave PostgreSQL and stay in ClickHouse (chDB); unshipped and young ones stay; a
// monthly partition wholly past the line is emptied whole (one held by a reader goes by deletes); a
// second run removes nothing; and what a deletion or retention counts (PostgreSQL's rows plus
// ClickHouse's trimmed ones, compared in PostgreSQL's order) does not change.
import { randomUUID } from 'node:crypto';
import type { EntityManager, MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { initOrm } from '../../../shared/platform/db/orm.ts';
import { rows, run } from '../../../shared/platform/db/sql.ts';
import { trimmedRanges, trimShippedEvents } from '../../../shared/events/buffer.ts';
import { createClickHouseEventStore, type ClickHouseEventStore } from '../../../shared/events/clickhouse.ts';
import { withPostgresSource } from '../../../shared/events/create.ts';
import type { EventDeletionGroup, EventRow, EventStore } from '../../../shared/events/event-store.ts';
import { createPostgresEventStore } from '../../../shared/events/postgres.ts';
import { shipEvents } from '../../../shared/events/shipper.ts';
import { runRetention } from '../../../shared/retention/run.ts';
import { storeEvents } from '../../../shared/events/store.ts';
import { createAccount, ownDatabase } from '../../helpers.ts';
import { chdbClient, chdbDatabase } from '../../clickhouse.ts';
import { insertPerson } from './persons.ts';

// A database of its own: the shipment's mark and the trim's are database-wide.
let orm: MikroORM;
let pg: EventStore;
let ch: ClickHouseEventStore;
let both: ClickHouseEventStore;
let projectId: number;
/** Another project's events, shipped and trimmed with the first test's, sent again by the last. */
let other: number;
let B: { id: string; uuid: string };
let retried: EventRow[];
const em = () => orm.em.fork() as EntityManager;
const HOUR = 3_600_000;
const hoursAgo = (h: number) => new Date(Date.now() - h * HOUR);
const trimOptions = { bufferHours: 7 * 24, chunk: 1000, lockTimeoutMs: 2000 };
const trim = () => trimShippedEvents(orm, trimOptions);
const ship = () => shipEvents(orm, ch, { batchSize: 1000, settleSeconds: 0 });
// Months long before any test run: their partitions hold only events stored 30 days ago.
const OLD_MONTH = { name: 'event_y2025m03', from: '2025-03-01T00:00:00Z', to: '2025-04-01T00:00:00Z' };
const BUSY_MONTH = { name: 'event_y2025m02', from: '2025-02-01T00:00:00Z', to: '2025-03-01T00:00:00Z' };

const event = (distinctId: string, personUuid: string, timestamp: Date, project = projectId): EventRow => ({
  uuid: randomUUID(),
  projectId: project,
  event: 'pageview',
  distinctId,
  personId: personUuid,
  properties: {},
  timestamp,
});

/** The uuids PostgreSQL's `event` holds, sorted. */
const pgUuids = async () =>
  (await rows<{ uuid: string }>(em(), `select uuid::text as uuid from event order by uuid`)).map((r) => r.uuid);
const sorted = (events: EventRow[]) => events.map((e) => e.uuid).sort();

let A: { id: string; uuid: string };
let group: EventDeletionGroup;
/** By when each was stored: 30 days ago (the old months' partitions), 10 and 9 days ago, and 1 hour ago. */
const stored: Record<'month' | 'busy' | 'tenDays' | 'nineDays' | 'young', EventRow[]> = {
  month: [],
  busy: [],
  tenDays: [],
  nineDays: [],
  young: [],
};

beforeAll(async () => {
  orm = await initOrm(await ownDatabase('event_buffer'), 3);
  projectId = (await createAccount(orm)).projectId;
  other = (await createAccount(orm)).projectId;
  pg = createPostgresEventStore(orm, { deleteChunk: 1000 });
  ch = createClickHouseEventStore(chdbClient(), chdbDatabase('buffer'), orm);
  await ch.migrate();
  both = withPostgresSource(pg, ch, orm);
  for (const month of [OLD_MONTH, BUSY_MONTH]) {
    await run(em(), `create table ${month.name} (like event including defaults)`);
    await run(em(), `alter table event attach partition ${month.name} for values from (?) to (?)`, [
      month.from,
      month.to,
    ]);
  }
  A = await insertPerson(em(), projectId, ['a']);
  B = await insertPerson(em(), other, ['b']);
  group = { cutoff: new Date().toISOString(), personIds: [A.uuid], distinctIds: ['a'] };
});

afterAll(async () => {
  await orm.close();
});

describe('PostgreSQL as a buffer of shipped events', () => {
  it('removes shipped events stored before the buffer, emptying a partition wholly past it without deletes', async () => {
    // Shipped: three in one old month's partition and two in another's (stored 30 days ago), two in
    // this month's stored 10 days ago.
    stored.month = [0, 1, 2].map(() => event('a', A.uuid, new Date('2025-03-10T12:00:00Z')));
    stored.busy = [0, 1].map(() => event('a', A.uuid, new Date('2025-02-10T12:00:00Z')));
    await storeEvents(em(), [...stored.month, ...stored.busy], hoursAgo(30 * 24));
    stored.tenDays = [0, 1].map(() => event('a', A.uuid, hoursAgo(1)));
    retried = [0, 1].map(() => event('b', B.uuid, hoursAgo(1), other));
    await storeEvents(em(), [...stored.tenDays, ...retried], hoursAgo(10 * 24));
    expect(await ship()).toMatchObject({ events: 9 });
    // Not shipped yet: two stored 9 days ago (past the buffer, but after the mark) and two young ones.
    stored.nineDays = [0, 1].map(() => event('a', A.uuid, hoursAgo(1)));
    await storeEvents(em(), stored.nineDays, hoursAgo(9 * 24));
    stored.young = [0, 1].map(() => event('a', A.uuid, hoursAgo(1)));
    await storeEvents(em(), stored.young, hoursAgo(1));
    expect(await ch.countEvents(projectId)).toBe(7);
    const [mark] = await rows<{ created_at: string; uuid: string }>(
      em(),
      `select created_at::text, uuid::text from event_shipment where target = 'clickhouse'`,
    );

    // A reader holds one old month's partition: the trim does not wait past its lock timeout, and
    // that month's rows go by the deletes instead.
    let release!: () => void;
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    let locked!: () => void;
    const taken = new Promise<void>((resolve) => {
      locked = resolve;
    });
    const holding = (orm.em.fork() as EntityManager).transactional(async (tx) => {
      await run(tx, `lock table ${BUSY_MONTH.name} in access share mode`);
      locked();
      await held;
    });
    await taken;
    let first: Awaited<ReturnType<typeof trim>>;
    try {
      first = await trimShippedEvents(orm, { ...trimOptions, lockTimeoutMs: 50, chunk: 4 });
    } finally {
      release();
      await holding;
    }
    // The other old month went whole (TRUNCATE, no row read); this month's four shipped rows and the
    // busy month's two by deletes of at most four rows: two statements.
    expect(first).toMatchObject({
      skipped: false,
      upTo: { createdAt: mark.created_at, uuid: mark.uuid },
      partitionsBusy: [BUSY_MONTH.name],
      rowsDeleted: 6,
      statements: 2,
    });
    expect(first.partitionsEmptied.map((p) => p.name)).toEqual([OLD_MONTH.name]);
    expect(await pgUuids()).toEqual(sorted([...stored.nineDays, ...stored.young]));
    // ClickHouse still holds every shipped event.
    expect(await ch.countEvents(projectId)).toBe(7);

    // A second run finds nothing to remove.
    expect(await trim()).toMatchObject({ partitionsEmptied: [], partitionsBusy: [], rowsDeleted: 0, statements: 0 });
    expect(await pgUuids()).toEqual(sorted([...stored.nineDays, ...stored.young]));

    // Once shipped, the 9-day-old events go too; the young ones stay (shipped, inside the buffer).
    expect(await ship()).toMatchObject({ events: 4 });
    expect(await trim()).toMatchObject({ partitionsEmptied: [], rowsDeleted: 2 });
    expect(await pgUuids()).toEqual(sorted(stored.young));
    expect(await ch.countEvents(projectId)).toBe(11);
    // The walk has passed the emptied month's mark: one range left, every timestamp up to the line.
    expect(await trimmedRanges(em())).toEqual([expect.objectContaining({ from: null, to: null })]);
  });

  it("counts a deletion's and retention's events once across both stores, and a person deletion empties both", async () => {
    // PostgreSQL holds the two young events; ClickHouse holds all eleven (nine only there now).
    expect(await pg.countEvents(projectId)).toBe(2);
    const counts = await both.personEventCounts(projectId, group);
    expect(counts).toEqual([{ personId: A.uuid, distinctId: 'a', n: 11 }]);
    expect(await both.countEventsBefore(projectId, new Date(Date.now() + HOUR))).toBe(11);
    // Events before April 2025 (the old months' five, trimmed): ClickHouse's alone.
    expect(await both.countEventsBefore(projectId, new Date(OLD_MONTH.to))).toBe(5);

    const recorded: number[] = [];
    const keys: number[] = [];
    // Two requests of the batch for the same person (two groups): each event counts once, the first group's.
    const deleted = await both.deletePersonEvents(projectId, [group, { ...group }], {
      record: async (n) => {
        recorded.push(n);
      },
      recordKeys: async (found) => {
        keys.push(...found.map((c) => c.n));
      },
      done: async () => undefined,
    });
    expect(deleted).toBe(11);
    expect(recorded.reduce((a, b) => a + b, 0)).toBe(11);
    expect(keys.reduce((a, b) => a + b, 0)).toBe(11);
    expect(await pg.countPersonEvents(projectId, [group])).toBe(0);
    expect(await ch.countPersonEvents(projectId, [group])).toBe(0);
    expect(await both.personEventCounts(projectId, group)).toEqual([]);
  });

  it('a retried batch older than the buffer is stored and shipped again, and ClickHouse still counts each event once', async () => {
    // Shipped and trimmed with the first test's events (stored 10 days ago).
    expect(await ch.countEvents(other)).toBe(2);
    expect(await pg.countEvents(other)).toBe(0);
    // The SDK sends the same batch again: PostgreSQL no longer has the uuids to drop it as a repeat.
    await storeEvents(em(), retried, new Date());
    expect(await ship()).toMatchObject({ events: 2 });
    expect(await ch.countEvents(other)).toBe(2);
    // A deletion of the person removes both copies from both stores.
    const b = { cutoff: new Date().toISOString(), personIds: [B.uuid], distinctIds: ['b'] };
    await both.deletePersonEvents(other, [b], { record: async () => undefined, done: async () => undefined });
    expect(await pg.countPersonEvents(other, [b])).toBe(0);
    expect(await ch.countPersonEvents(other, [b])).toBe(0);
  });

  it("a retention run counts the events past its line once: ClickHouse's trimmed ones and PostgreSQL's rows", async () => {
    const project = (await createAccount(orm)).projectId;
    await run(em(), `update project set event_retention_days = 30 where id = ?`, [project]);
    const P = await insertPerson(em(), project, ['r']);
    // Imported with old timestamps (the old month's), shipped, and trimmed with a buffer of none.
    const shipped = [0, 1].map(() => event('r', P.uuid, new Date('2025-03-15T00:00:00Z'), project));
    await storeEvents(em(), shipped);
    await ship();
    expect(await trimShippedEvents(orm, { ...trimOptions, bufferHours: 0 })).toMatchObject({
      partitionsEmptied: [expect.objectContaining({ name: OLD_MONTH.name })],
    });
    expect(await pg.countEvents(project)).toBe(0);
    // One more, still only in PostgreSQL (not shipped).
    await storeEvents(em(), [event('r', P.uuid, new Date('2025-03-16T00:00:00Z'), project)]);
    expect(await both.countEventsBefore(project, new Date(OLD_MONTH.to))).toBe(3);

    // The old month's partition holds only this project's row past its line: dropped whole (counted
    // from PostgreSQL), and ClickHouse's two trimmed events go by the event store.
    const result = await runRetention(em(), new Date(), {
      chunk: 1000,
      lockTimeoutMs: 2000,
      lockAttempts: 1,
      events: both,
    });
    expect(result.partitionsDropped).toEqual([OLD_MONTH.name]);
    expect(result.projects).toEqual([expect.objectContaining({ projectId: project, events: 3 })]);
    expect(await ch.countEvents(project)).toBe(0);
    expect(await both.countEventsBefore(project, new Date(OLD_MONTH.to))).toBe(0);
  });

  it("ClickHouse's trimmed ranges compare positions as PostgreSQL does: uuids in byte order, the mark's own row included", async () => {
    const project = (await createAccount(orm)).projectId;
    // PostgreSQL orders y after x (bytes); the halves of the 128 bits would order them the other way.
    const x = '00000000-0000-0000-ffff-ffffffffffff';
    const y = '00000000-0000-0001-0000-000000000000';
    const [{ after }] = await rows<{ after: boolean }>(em(), `select ?::uuid > ?::uuid as after`, [y, x]);
    expect(after).toBe(true);
    const at = '2026-01-02 03:04:05.123456';
    await ch.insertRows(
      [x, y].map((uuid) => ({
        uuid,
        project_id: project,
        event: 'e',
        distinct_id: 'd',
        person_id: null,
        properties: '{}',
        timestamp: at,
        created_at: at,
      })),
    );
    const upTo = (createdAt: string, uuid: string, from: string | null = null, to: string | null = null) =>
      ch.countTrimmedEventsBefore(project, new Date('2027-01-01T00:00:00Z'), [{ from, to, createdAt, uuid }]);
    expect(await upTo(at, x)).toBe(1);
    expect(await upTo(at, y)).toBe(2);
    expect(await upTo('2026-01-02 03:04:05.123455', 'ffffffff-ffff-ffff-ffff-ffffffffffff')).toBe(0);
    // A month's range covers only its timestamps.
    expect(await upTo(at, y, '2026-01-01 00:00:00.000000', '2026-02-01 00:00:00.000000')).toBe(2);
    expect(await upTo(at, y, '2026-02-01 00:00:00.000000', '2026-03-01 00:00:00.000000')).toBe(0);
  });
});
