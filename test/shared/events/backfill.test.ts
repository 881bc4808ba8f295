// Backfilling an existing install's events to ClickHouse (chDB) when it switches to
// EVENT_STORE=clickhouse: one project or all, through the shipper's walk, so a backfill stopped
// anywhere resumes at its mark, a second run sends nothing, and the worker's shipper afterwards adds
// nothing either. Then `npm run manage -- events backfill`'s refusals, as an operator sees them.
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import type { EntityManager, MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { initOrm } from '../../../shared/platform/db/orm.ts';
import { createClickHouseEventStore, type ClickHouseEventStore } from '../../../shared/events/clickhouse.ts';
import type { EventRow, EventStore, FunnelParams } from '../../../shared/events/event-store.ts';
import { createPostgresEventStore } from '../../../shared/events/postgres.ts';
import { backfillEvents, type BackfillProgress, shipEvents, unshippedEvents } from '../../../shared/events/shipper.ts';
import { storeEvents } from '../../../shared/events/store.ts';
import { createAccount, ownDatabase } from '../../helpers.ts';
import { chdbClient, chdbDatabase } from '../../clickhouse.ts';
import { insertPerson } from './persons.ts';

// A database of its own: the shipment marks and the outbox triggers are database-wide.
let url: string;
let orm: MikroORM;
let pg: EventStore;
let ch: ClickHouseEventStore;
let p1: number;
let p2: number;
const em = () => orm.em.fork() as EntityManager;
const T0 = Date.parse('2026-02-02T10:00:00.000Z');
const funnel: FunnelParams = {
  steps: ['signup', 'pay'],
  from: new Date(T0 - 86_400_000),
  to: new Date(T0 + 86_400_000),
  windowDays: 7,
};
const options = { batchSize: 3, settleSeconds: 30 };
const person = (projectId: number, distinctId: string) => insertPerson(em(), projectId, [distinctId]);

/** `n` persons of a project, each with a signup and (every other one) a pay, stored an hour ago. */
async function history(projectId: number, n: number) {
  const events: EventRow[] = [];
  for (let i = 0; i < n; i++) {
    const p = await person(projectId, `u${i}`);
    const at = (ms: number) => new Date(T0 + i * 1000 + ms);
    const e = (name: string, ms: number) => ({
      uuid: randomUUID(),
      projectId,
      event: name,
      distinctId: `u${i}`,
      personId: p.uuid,
      properties: { plan: i % 3 === 0 ? 'pro' : 'free', i },
      timestamp: at(ms),
    });
    events.push(e('signup', 0));
    if (i % 2 === 0) events.push(e('pay', 60_000));
  }
  await storeEvents(em(), events, new Date(Date.now() - 3_600_000));
  return events.length;
}

/** Rows physically in ClickHouse for a project (a batch inserted twice would show here before a merge). */
async function physicalRows(projectId: number) {
  const result = await ch.client.query({
    query: `SELECT count() AS n FROM ${ch.database}.events WHERE project_id = {p:Int64}`,
    query_params: { p: projectId },
    format: 'JSONEachRow',
  });
  return Number((await result.json<{ n: string }>())[0].n);
}

/** The funnel and a behavioural cohort of a project: the same from both stores. */
async function sameAnswers(projectId: number) {
  const of = async (store: EventStore) => ({
    funnel: await Promise.all(
      [1, 2].map((step) => store.funnelPersonIds(projectId, funnel, step, { limit: 100, offset: 0 })),
    ),
    cohort: await store.performedEventPersonIds(projectId, {
      event: 'pay',
      since: funnel.from,
      times: 1,
      eventFilters: [{ key: 'plan', operator: 'exact', value: 'pro', type: 'event' }],
    }),
  });
  const fromPg = await of(pg);
  expect(await of(ch)).toEqual(fromPg);
  return fromPg;
}

beforeAll(async () => {
  url = await ownDatabase('event_backfill');
  orm = await initOrm(url, 3);
  p1 = (await createAccount(orm)).projectId;
  p2 = (await createAccount(orm)).projectId;
  pg = createPostgresEventStore(orm, { deleteChunk: 1000 });
  ch = createClickHouseEventStore(chdbClient(), chdbDatabase('backfill'), orm);
  await ch.migrate();
  // Merges would fold a doubled row away in the background and hide it from the physical counts.
  await ch.client.command({ query: `SYSTEM STOP MERGES ${ch.database}.events` });
});

afterAll(async () => {
  await orm.close();
});

describe('backfilling existing events to ClickHouse', () => {
  let n1: number;
  let n2: number;

  it('copies one project’s events with its persons mirrored, progress reported; a second run copies nothing', async () => {
    n1 = await history(p1, 7); // 11 events
    n2 = await history(p2, 9); // 14 events
    expect(await unshippedEvents(em(), p1)).toBe(n1);
    const seen: BackfillProgress[] = [];
    const result = await backfillEvents(orm, ch, { ...options, projectId: p1, onProgress: (p) => seen.push(p) });
    expect(result).toMatchObject({ events: n1, batches: Math.ceil(n1 / 3), total: n1, left: 0, distinctIds: 7 });
    expect(seen.map((p) => p.events)).toEqual([...seen.map((p) => p.events)].sort((a, b) => a - b));
    expect(seen.at(-1)?.events).toBe(n1);
    expect([await ch.countEvents(p1), await physicalRows(p1), await physicalRows(p2)]).toEqual([n1, n1, 0]);
    const answers = await sameAnswers(p1);
    expect(answers.funnel[0].count).toBe(7);
    expect(answers.cohort).toHaveLength(2); // persons 0 and 6: pro, and paid

    const again = await backfillEvents(orm, ch, { ...options, projectId: p1 });
    expect(again).toMatchObject({ events: 0, total: 0, left: 0 });
    expect(await physicalRows(p1)).toBe(n1);
  });

  it('resumes a backfill stopped mid-way at its mark, sending nothing twice', async () => {
    let sent = 0;
    const dying: ClickHouseEventStore = {
      ...ch,
      insertRows: async (values, token) => {
        await ch.insertRows(values, token);
        sent += values.length;
        if (sent >= 6) throw new Error('killed after ClickHouse took the second batch');
      },
    };
    await expect(backfillEvents(orm, dying, { ...options, projectId: p2 })).rejects.toThrow('killed');
    expect(await physicalRows(p2)).toBe(6);
    expect(await unshippedEvents(em(), p2)).toBe(n2 - 3); // the second batch is still pending
    const resumed = await backfillEvents(orm, ch, { ...options, projectId: p2 });
    expect(resumed).toMatchObject({ events: n2 - 3, left: 0 });
    expect([await ch.countEvents(p2), await physicalRows(p2)]).toEqual([n2, n2]); // the resent batch dropped
    await sameAnswers(p2);
  });

  it('backfills every project through the main mark, after which the worker’s shipper has nothing to send', async () => {
    const late = await person(p2, 'late');
    await storeEvents(em(), [
      {
        uuid: randomUUID(),
        projectId: p2,
        event: 'signup',
        distinctId: 'late',
        personId: late.uuid,
        properties: {},
        timestamp: new Date(T0),
      },
    ]); // just now: not settled
    const all = await backfillEvents(orm, ch, options);
    // The main mark starts from the beginning: the projects' rows go again (folded on merge, counted once).
    expect(all).toMatchObject({ events: n1 + n2, total: n1 + n2 + 1, left: 1 });
    expect([await ch.countEvents(p1), await ch.countEvents(p2)]).toEqual([n1, n2]);
    await sameAnswers(p1);
    expect(await shipEvents(orm, ch, options)).toMatchObject({ skipped: false, events: 0 });
    // Once settled the young one goes, with the person made after the first mirror.
    expect(await shipEvents(orm, ch, { ...options, settleSeconds: 0 })).toMatchObject({ events: 1 });
    expect(await ch.countEvents(p2)).toBe(n2 + 1);
    await sameAnswers(p2);
  });
});

describe('npm run manage -- events backfill', () => {
  const root = fileURLToPath(new URL('../../..', import.meta.url));
  const manage = (env: Record<string, string>, ...args: string[]) =>
    new Promise<{ code: number; stdout: string; stderr: string }>((resolve) =>
      execFile(
        process.execPath,
        ['scripts/manage.ts', 'events', 'backfill', ...args],
        {
          cwd: root,
          env: { ...process.env, LOG_LEVEL: 'silent', DATABASE_URL: url, DATABASE_DIRECT_URL: url, ...env },
        },
        (error, stdout, stderr) => resolve({ code: error ? Number(error.code ?? 1) : 0, stdout, stderr }),
      ),
    );

  it('refuses in one line without EVENT_STORE=clickhouse, an unknown project, or ClickHouse away', {
    timeout: 120_000,
  }, async () => {
    const clickhouse = { EVENT_STORE: 'clickhouse', CLICKHOUSE_URL: 'http://127.0.0.1:9' };
    const [postgres, unknown, away] = await Promise.all([
      manage({ EVENT_STORE: 'postgres' }),
      manage(clickhouse, '--project', '999999'),
      manage(clickhouse, '--project', String(p1)),
    ]);
    expect(postgres).toMatchObject({ code: 1, stdout: '' });
    expect(postgres.stderr).toMatch(/^Error: EVENT_STORE is postgres: run this with EVENT_STORE=clickhouse/);
    expect(unknown).toMatchObject({ code: 1, stderr: 'Error: No project 999999\n' });
    expect(away.code).toBe(1);
    expect(away.stderr).toMatch(/^Error: cannot reach ClickHouse at 127\.0\.0\.1:9 /);
    expect(away.stderr.trim().split('\n')).toHaveLength(1);
  });
});
