// The ship-events job (EVENT_STORE=clickhouse) and what operators see of it: the lag on
// /metrics/global and the event_shipping check of /_ready. ClickHouse is chDB in this process; the
// PostgreSQL database is the file's own (the shipment mark and outbox triggers are database-wide).
import { randomUUID } from 'node:crypto';
import type { Job } from 'bullmq';
import type { EntityManager, MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig, type Config } from '../../../shared/platform/config.ts';
import { initOrm } from '../../../shared/platform/db/orm.ts';
import { rows, run } from '../../../shared/platform/db/sql.ts';
import { createClickHouseEventStore, type ClickHouseEventStore } from '../../../shared/events/clickhouse.ts';
import { withPostgresSource } from '../../../shared/events/create.ts';
import { createPostgresEventStore } from '../../../shared/events/postgres.ts';
import { storeEvents } from '../../../shared/events/store.ts';
import type { EventStore } from '../../../shared/events/event-store.ts';
import { logger } from '../../../shared/platform/logger.ts';
import { shipEventsJob } from '../../../shared/events/ship-job.ts';
import { call, createAccount, ownDatabase, startApi, type TestApi } from '../../helpers.ts';
import { metricValue, scrape } from '../../api/ops/exposition.ts';
import { chdbClient, chdbDatabase } from '../../clickhouse.ts';
import { startClickHouseServer } from '../../services.ts';

const TOKEN = 'ship-events-test-token';
let url: string;
let orm: MikroORM;
let config: Config;
let ch: ClickHouseEventStore;
let events: EventStore;
let api: TestApi;
let front: Awaited<ReturnType<typeof startClickHouseServer>>;
let projectId: number;
const job = {} as Job<Record<string, never>>;

beforeAll(async () => {
  url = await ownDatabase('ship_events_job');
  orm = await initOrm(url, 3);
  projectId = (await createAccount(orm)).projectId;
  config = loadConfig();
  config.events.engine = 'clickhouse';
  config.events.shipSettleSeconds = 0;
  config.events.shipMaxLagSeconds = 60;
  ch = createClickHouseEventStore(chdbClient(), chdbDatabase('ship_job'), orm);
  events = withPostgresSource(createPostgresEventStore(orm, { deleteChunk: 1000 }), ch, orm);
  // The API's /_ready also asks ClickHouse whether it answers: a server (the test-only front) it can reach.
  front = await startClickHouseServer();
  api = await startApi((c) => {
    c.databaseUrl = url;
    c.databaseDirectUrl = url;
    c.metricsToken = TOKEN;
    c.events = { ...config.events, clickhouseUrl: front.url };
  });
});

afterAll(async () => {
  await api?.close();
  await front?.stop();
  await orm?.close();
});

const stored = (n: number, createdAt: Date) =>
  storeEvents(
    orm.em.fork() as EntityManager,
    Array.from({ length: n }, (_, i) => ({
      uuid: randomUUID(),
      projectId,
      event: 'pageview',
      distinctId: `d${i}`,
      personId: null,
      properties: {},
      timestamp: new Date(createdAt.getTime() - 1000),
    })),
    createdAt,
  );

async function globalLag(): Promise<number> {
  const res = await scrape(api.baseUrl, TOKEN, '/metrics/global');
  expect(res.status).toBe(200);
  return metricValue(res.text, 'event_shipping_lag_seconds');
}

describe('ship-events job', () => {
  it('does nothing with EVENT_STORE=postgres', async () => {
    const postgres = createPostgresEventStore(orm, { deleteChunk: 1000 });
    expect(await shipEventsJob(job, { orm, config, logger, events: postgres })).toEqual({
      skipped: 'EVENT_STORE is postgres',
    });
  });

  it('reports the lag while events wait, ships them (creating the ClickHouse schema), and is ready again', async () => {
    // Events stored an hour ago and a shipment that has not moved since (a worker was down).
    await stored(3, new Date(Date.now() - 3_600_000));
    await run(
      orm.em.fork() as EntityManager,
      `insert into event_shipment (target, created_at, uuid) values ('clickhouse', '-infinity', '00000000-0000-0000-0000-000000000000')`,
    );
    const waiting = await call(api.baseUrl, 'GET', '/_ready');
    expect(waiting.status).toBe(200);
    expect(waiting.body).toMatchObject({ status: 'degraded', checks: { event_shipping: 'unavailable' } });
    expect(waiting.body.details.event_shipping).toContain('EVENT_SHIP_MAX_LAG_SECONDS');
    expect(await globalLag()).toBeGreaterThan(3500);

    const result = await shipEventsJob(job, { orm, config, logger, events });
    expect(result).toMatchObject({ skipped: false, events: 3, lagSeconds: 0 });
    expect(await ch.countEvents(projectId)).toBe(3);
    expect(await events.countEvents(projectId)).toBe(3);

    const ready = await call(api.baseUrl, 'GET', '/_ready');
    expect(ready.body).toMatchObject({ status: 'ok', checks: { event_shipping: 'ok' } });
    expect(await globalLag()).toBe(0);
  });

  it('after shipping, removes from PostgreSQL the shipped events older than EVENT_BUFFER_HOURS', async () => {
    // The three events above were stored an hour ago: past a one-hour buffer now. A new one ships and stays.
    await stored(1, new Date());
    const pgEvents = async () =>
      (await rows<{ n: number }>(orm.em.fork() as EntityManager, `select count(*)::int as n from event`))[0].n;
    expect(await pgEvents()).toBe(4);
    const result = await shipEventsJob(job, {
      orm,
      config: { ...config, events: { ...config.events, bufferHours: 1 } },
      logger,
      events,
    });
    expect(result).toMatchObject({ events: 1, trimmed: { skipped: false, rowsDeleted: 3, partitionsBusy: [] } });
    expect(await pgEvents()).toBe(1);
    expect(await ch.countEvents(projectId)).toBe(4);
  });
});
