// The retention job with EVENT_STORE=clickhouse: a project's events past its line go from PostgreSQL
// and their copies from ClickHouse (chDB) too: a month wholly before the line holding only that
// project's events is moved out whole, every other row past the line is masked by one lightweight
// DELETE; events after the line and other projects' events stay in both; the run counts the events
// once (PostgreSQL's); a second run removes nothing. Another project's event shipped into a month
// between the look and the move is put back, and so is a month a run died holding.
import { randomUUID } from 'node:crypto';
import type { Job } from 'bullmq';
import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../../shared/platform/config.ts';
import { initOrm } from '../../../shared/platform/db/orm.ts';
import { createClickHouseEventStore, type ClickHouseEventStore } from '../../../shared/events/clickhouse.ts';
import { withPostgresSource } from '../../../shared/events/create.ts';
import type { EventRow, EventStore } from '../../../shared/events/event-store.ts';
import { createPostgresEventStore } from '../../../shared/events/postgres.ts';
import type { JobData } from '../../../shared/platform/jobs.ts';
import { logger } from '../../../shared/platform/logger.ts';
import { retentionCutoff } from '../../../shared/retention/rules.ts';
import { enforceRetention } from '../../../shared/retention/job.ts';
import type { WorkerDeps } from '../../../worker/deps.ts';
import { sql } from '../../db.ts';
import { createAccount, ownDatabase } from '../../helpers.ts';
import { chdbClient, chdbDatabase } from '../../clickhouse.ts';

const H = 3_600_000;
// A database of its own: a retention run covers every project with retention set.
let orm: MikroORM;
let ch: ClickHouseEventStore;
let pg: EventStore;
let deps: WorkerDeps;
let kept: number; // a project that keeps everything
let expiring: number; // 30 days of events

beforeAll(async () => {
  const config = loadConfig();
  orm = await initOrm(await ownDatabase('retention_clickhouse'), 2);
  ch = createClickHouseEventStore(chdbClient(), chdbDatabase('retention'), orm);
  expect(await ch.migrate()).toContain('0003-events-retention');
  pg = createPostgresEventStore(orm, { deleteChunk: 1000 });
  // No Redis: nothing is enqueued for a handful of rows (the vacuum threshold is far above them).
  deps = { config, orm, events: withPostgresSource(pg, ch, orm), logger, connection: null } as unknown as WorkerDeps;
  kept = (await createAccount(orm)).projectId;
  expiring = (await createAccount(orm)).projectId;
  await sql(orm, `update project set event_retention_days = 30 where id = ?`, [expiring]);
});
afterAll(() => orm?.close());

const event = (projectId: number, timestamp: Date): EventRow => ({
  uuid: randomUUID(),
  projectId,
  event: 'pageview',
  distinctId: `d-${projectId}`,
  personId: null,
  properties: {},
  timestamp,
});

const fakeJob = () =>
  ({ id: 'retention-test', updateProgress: async () => undefined }) as unknown as Job<JobData['retention']>;

/** A project's events in ClickHouse before and from a moment, and the rows physically there (masked ones excluded). */
async function clickHouseCounts(projectId: number, line: Date) {
  return { before: await ch.countEventsBefore(projectId, line), all: await ch.countEvents(projectId) };
}

describe('retention with the ClickHouse event store', () => {
  it("removes a project's events past its line from PostgreSQL and ClickHouse, months only it holds whole", async () => {
    const now = new Date();
    const line = retentionCutoff(30, now)!;
    const month = (back: number, day: number) =>
      new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() - back, day, 12));
    const alone = month(5, 10); // only the expiring project's events: the month goes whole
    const shared = month(4, 10); // the kept project's too: deleted row by row
    const events = [
      event(expiring, alone),
      event(expiring, new Date(alone.getTime() + H)),
      event(expiring, shared),
      event(kept, shared),
      event(expiring, new Date(line.getTime() - H)), // the month the line cuts
      event(kept, new Date(line.getTime() - 2 * H)),
      event(expiring, new Date(line.getTime() + H)), // after the line: stays
      event(expiring, new Date(line.getTime())), // at the line: stays
    ];
    await pg.insert(events);
    await ch.insert(events);
    expect(await clickHouseCounts(expiring, line)).toEqual({ before: 4, all: 6 });
    const partition = `${alone.getUTCFullYear()}${String(alone.getUTCMonth() + 1).padStart(2, '0')}`;
    // Rows in the month's parts: a lightweight DELETE only masks rows (they stay until a merge), a
    // month moved out leaves none (at most an empty part covering what was there).
    const rowsInMonth = async () => {
      const result = await ch.client.query({
        query: `SELECT sum(rows) AS n FROM system.parts WHERE database = {db:String} AND table = 'events' AND partition_id = {p:String} AND active`,
        query_params: { db: ch.database, p: partition },
        format: 'JSONEachRow',
      });
      return Number((await result.json<{ n: string }>())[0].n);
    };
    expect(await rowsInMonth()).toBe(2);

    const summary = await enforceRetention(fakeJob(), deps);
    expect(summary.removed).toBe(4); // counted once: PostgreSQL's rows

    expect(await pg.countEventsBefore(expiring, line)).toBe(0);
    expect(await pg.countEvents(expiring)).toBe(2);
    expect(await pg.countEvents(kept)).toBe(2);
    expect(await clickHouseCounts(expiring, line)).toEqual({ before: 0, all: 2 });
    expect(await clickHouseCounts(kept, line)).toEqual({ before: 2, all: 2 });
    expect(await rowsInMonth()).toBe(0); // moved out whole, not masked row by row
    const scratch = await ch.client.query({
      query: `SELECT count() AS n FROM ${ch.database}.events_retention`,
      format: 'JSONEachRow',
    });
    expect(Number((await scratch.json<{ n: string }>())[0].n)).toBe(0);
    const [record] = await sql<{ events: number }>(
      orm,
      `select events_deleted::int as events from retention_run where project_id = ? order by id desc limit 1`,
      [expiring],
    );
    expect(record.events).toBe(4);

    // Nothing is left past the line: a second run removes nothing from either.
    expect((await enforceRetention(fakeJob(), deps)).removed).toBe(0);
    expect(await ch.deleteEventsBefore(expiring, line, { chunk: 1000 })).toBe(0);
    expect(await clickHouseCounts(kept, line)).toEqual({ before: 2, all: 2 });
  });

  it("puts back another project's event shipped into a month between the look and the move", async () => {
    const now = new Date();
    const line = retentionCutoff(30, now)!;
    const old = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() - 8, 3, 12));
    await ch.insert([event(expiring, old), event(expiring, new Date(old.getTime() + H))]);
    const late = event(kept, new Date(old.getTime() + 2 * H));
    // The same store, its client shipping `late` into the month just before the move.
    const client = ch.client;
    const racing = new Proxy(client, {
      get(target, prop) {
        if (prop === 'command')
          return async (params: Parameters<typeof client.command>[0]) => {
            if (params.query.includes('MOVE PARTITION')) await ch.insert([late]);
            return target.command(params);
          };
        const value = Reflect.get(target, prop, target);
        return typeof value === 'function' ? value.bind(target) : value;
      },
    });
    const store = createClickHouseEventStore(racing, ch.database, orm);
    const keptBefore = await ch.countEvents(kept);
    expect(await store.deleteEventsBefore(expiring, line, { chunk: 1000 })).toBe(2);
    expect(await ch.countEventsBefore(expiring, line)).toBe(0);
    expect(await ch.countEvents(kept)).toBe(keptBefore + 1);
    const back = await ch.client.query({
      query: `SELECT toString(uuid) AS uuid FROM ${ch.database}.events WHERE project_id = {p:Int64} AND timestamp < {line:DateTime64(6, 'UTC')}`,
      query_params: { p: kept, line: line.toISOString().replace('T', ' ').replace('Z', '') },
      format: 'JSONEachRow',
    });
    expect((await back.json<{ uuid: string }>()).map((r) => r.uuid)).toContain(late.uuid);
  });

  it('puts back a month a run left moved out when it died before putting it back', async () => {
    const now = new Date();
    const line = retentionCutoff(30, now)!;
    const stranded = event(kept, new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() - 9, 3, 12)));
    await ch.insert([stranded]);
    const month = `${stranded.timestamp.getUTCFullYear()}${String(stranded.timestamp.getUTCMonth() + 1).padStart(2, '0')}`;
    await ch.client.command({
      query: `ALTER TABLE ${ch.database}.events MOVE PARTITION ID '${month}' TO TABLE ${ch.database}.events_retention`,
    });
    const keptBefore = await ch.countEvents(kept);
    expect(await ch.deleteEventsBefore(expiring, line, { chunk: 1000 })).toBe(0); // nothing of its own left
    expect(await ch.countEvents(kept)).toBe(keptBefore + 1);
    const scratch = await ch.client.query({
      query: `SELECT count() AS n FROM ${ch.database}.events_retention`,
      format: 'JSONEachRow',
    });
    expect(Number((await scratch.json<{ n: string }>())[0].n)).toBe(0);
  });
});
