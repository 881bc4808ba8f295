// With EVENT_STORE=clickhouse the API process reaches ClickHouse over HTTP: here the test-only front
// (test/clickhouse-server.ts) that answers ClickHouse's HTTP interface from the chDB engine. First the
// front itself, through the official client as the store uses it; then /_ready: 503 naming clickhouse
// while the server is away (capture still answers 200 into PostgreSQL, the lag is reported), ready again
// once it is back.
import { execFileSync } from 'node:child_process';
import { createClient, type ClickHouseError } from '@clickhouse/client';
import { afterAll, describe, expect, it } from 'vitest';
import { initOrm } from '../../../shared/platform/db/orm.ts';
import { chdbDatabase } from '../../clickhouse.ts';
import { capture } from '../../fixtures.ts';
import { createAccount, eventually, uniqueRedisPrefix } from '../../helpers.ts';
import { root, startApiProcess, startClickHouseServer, type ServiceProcess } from '../../services.ts';

const started: ServiceProcess[] = [];
afterAll(async () => {
  await Promise.all(started.map((s) => s.stop()));
});

describe('the test-only ClickHouse HTTP front', () => {
  it('answers @clickhouse/client: DDL, inserts, parameters in text form, settings, errors with their codes', async () => {
    const front = await startClickHouseServer();
    started.push(front);
    const client = createClient({ url: front.url });
    const db = chdbDatabase('front');
    await client.command({ query: `CREATE DATABASE ${db}` });
    await client.command({
      query: `CREATE TABLE ${db}.t (id String, n UInt32, at DateTime64(3, 'UTC')) ENGINE = MergeTree ORDER BY id`,
    });
    await client.insert({
      table: `${db}.t`,
      values: [
        { id: "it's", n: 1, at: '2026-11-01 10:00:00.000' },
        { id: 'back\\slash', n: 2, at: '2026-11-02 10:00:00.000' },
      ],
      format: 'JSONEachRow',
    });
    const rows = await client
      .query({
        query: `SELECT id, n FROM ${db}.t WHERE id IN {ids:Array(String)} ORDER BY n`,
        query_params: { ids: ["it's", 'back\\slash'] },
        format: 'JSONEachRow',
      })
      .then((r) => r.json());
    expect(rows).toEqual([
      { id: "it's", n: 1 },
      { id: 'back\\slash', n: 2 },
    ]);
    const error = (await client.query({ query: `SELECT 1 FROM ${db}.missing` }).catch((e) => e)) as ClickHouseError;
    expect(error.code).toBe('60');
    expect(error.type).toBe('UNKNOWN_TABLE');
    expect(await client.ping()).toEqual({ success: true });
    await client.close();
  }, 60_000);
});

describe('/_ready with EVENT_STORE=clickhouse', () => {
  it('is 503 naming clickhouse while it cannot be reached, capture still answers 200, and ready again once it is back', async () => {
    const front = await startClickHouseServer();
    started.push(front);
    const env = {
      EVENT_STORE: 'clickhouse',
      CLICKHOUSE_URL: front.url,
      CLICKHOUSE_DATABASE: chdbDatabase('ready'),
      REDIS_PREFIX: uniqueRedisPrefix(),
    };
    // The ClickHouse store's own migrations, as `npm run migrate` applies them.
    execFileSync(process.execPath, ['scripts/migrate.ts'], { cwd: root, env: { ...process.env, ...env } });
    const api = await startApiProcess(env);
    started.push(api);
    const ready = async () => {
      const res = await fetch(`${api.baseUrl}/_ready`);
      return { status: res.status, body: await res.json() };
    };
    const up = await ready();
    expect(up.status).toBe(200);
    expect(up.body.checks).toMatchObject({ clickhouse: 'ok', event_shipping: 'ok' });
    expect(up.body.event_shipping_lag_seconds).toBeGreaterThanOrEqual(0);

    await front.stop();
    const down = await ready();
    expect(down.status).toBe(503);
    expect(down.body.checks.clickhouse).toBe('unavailable');
    expect(down.body.details.clickhouse).toMatch(/ClickHouse does not answer/);
    const orm = await initOrm();
    try {
      const account = await createAccount(orm);
      await capture(api.baseUrl, account.projectToken, [{ event: 'while-away', distinct_id: 'ch-away' }]);
    } finally {
      await orm.close();
    }

    const back = await startClickHouseServer(front.port, front.path);
    started.push(back);
    const again = await eventually(async () => {
      const answer = await ready();
      return answer.status === 200 ? answer : null;
    });
    expect(again.body.checks.clickhouse).toBe('ok');
  }, 180_000);
});
