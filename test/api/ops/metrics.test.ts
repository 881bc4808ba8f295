// What an operator pages on: /metrics has this API process's figures, /metrics/global the install's
// (queues, deletion requests, workers), the same from every replica; both pass `promtool check metrics`.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { recordDeletionRequests } from '../../../shared/deletions/store.ts';
import { ensureDatabase } from '../../../shared/platform/db/ensure-database.ts';
import { initOrm, migrate } from '../../../shared/platform/db/orm.ts';
import { sql } from '../../db.ts';
import {
  call,
  createAccount,
  eventually,
  startApi,
  uniqueRedisPrefix,
  type TestAccount,
  type TestApi,
} from '../../helpers.ts';
import { matching, metricValue, promtool, samples, scrape } from './exposition.ts';
import { missingPackage } from '../../packages.ts';

const TOKEN = 'metrics-test-token';
const prefix = uniqueRedisPrefix();
// The global figures cover every deletion request of the install: exact counts and ages need a
// database no other test file writes to.
const databaseUrl = `${process.env.DATABASE_URL}_global_metrics`;
let api: TestApi;
let replica: TestApi;
let account: TestAccount;

const configure = (config: TestApi['config']) => {
  config.databaseUrl = databaseUrl;
  config.redisPrefix = prefix;
  config.metricsToken = TOKEN;
  config.rateLimit.enabled = true;
  config.authCacheSeconds = 60;
};

beforeAll(async () => {
  await ensureDatabase(databaseUrl);
  const orm = await initOrm(databaseUrl);
  try {
    await migrate(orm, databaseUrl);
  } finally {
    await orm.close();
  }
  api = await startApi(configure);
  replica = await startApi(configure);
  await sql(api.orm, 'delete from async_deletion');
  account = await createAccount(api.orm);
}, 120_000);
afterAll(async () => {
  await api?.close();
  await replica?.close();
});

const GLOBAL_NAMES = /^(bullmq_|deletion_|workers_reporting|metrics_source_up)/;

async function metricsOf(target: TestApi, path = '/metrics'): Promise<string> {
  const res = await scrape(target.baseUrl, TOKEN, path);
  expect(res.status, res.text.slice(0, 200)).toBe(200);
  expect(res.headers.get('content-type')).toContain('text/plain; version=0.0.4');
  return res.text;
}

describe('GET /metrics: this process', () => {
  it.skipIf(missingPackage('promtool'))(
    'counts events ingested, shows pool use, Redis, throttle and auth cache health, and passes promtool',
    async () => {
      const before = metricValue(await metricsOf(api), 'events_ingested_total');
      const batch = ['a', 'b', 'c'].map((name) => ({ event: `metrics-${name}`, distinct_id: 'user', properties: {} }));
      const sent = await call(api.baseUrl, 'POST', '/batch/', { body: { api_key: account.projectToken, batch } });
      expect(sent.status).toBe(200);

      // A connection held in a transaction is in use until the transaction ends.
      let release!: () => void;
      let holding!: () => void;
      const inside = new Promise<void>((resolve) => (holding = resolve));
      const held = api.orm.em.fork().transactional(async (em) => {
        await em.getConnection().execute('select 1', [], 'all', em.getTransactionContext());
        holding();
        await new Promise<void>((resolve) => (release = resolve));
      });
      await inside;
      const text = await metricsOf(api);
      release();
      await held;

      expect(metricValue(text, 'events_ingested_total')).toBe(before + 3);
      expect(metricValue(text, 'db_pool_connections_in_use')).toBe(1);
      expect(metricValue(text, 'db_pool_waiting_requests')).toBe(0);
      expect(metricValue(text, 'db_pool_connections_max')).toBe(10);
      expect(metricValue(text, 'redis_connection_up')).toBe(1);
      expect(metricValue(text, 'throttle_redis_usable')).toBe(1);
      expect(metricValue(text, 'auth_cache_listening')).toBe(1);
      expect(metricValue(await metricsOf(api), 'db_pool_connections_in_use')).toBe(0);
      // Global figures are not here, so summing this endpoint over replicas counts nothing twice.
      expect(samples(text).filter((s) => GLOBAL_NAMES.test(s.name))).toEqual([]);
      expect(promtool(text)).toEqual({ status: 0, output: '' });
    },
  );

  it('serves no throttle or auth cache figure where they are off', async () => {
    const plain = await startApi((config) => {
      config.redisPrefix = prefix;
      config.metricsToken = TOKEN;
    });
    try {
      const text = await metricsOf(plain);
      expect(matching(text, 'throttle_redis_usable')).toEqual([]);
      expect(matching(text, 'auth_cache_listening')).toEqual([]);
      // Up once its connection is (a fresh process connects in the background).
      await eventually(async () => metricValue(await metricsOf(plain), 'redis_connection_up') === 1);
    } finally {
      await plain.close();
    }
  });
});

describe('GET /metrics/global: the install', () => {
  it.skipIf(missingPackage('promtool'))(
    'shows queue sizes and the age of the longest-waiting runnable job per queue',
    async () => {
      const now = Date.now();
      const { experimentResults, deletions, maintenance } = api.deps.queues;
      await experimentResults.add('compute', {}, { timestamp: now - 120_000 });
      await experimentResults.add('compute', {}, { timestamp: now - 10_000 });
      // Due 299 s ago, and no worker runs to promote it: waiting as much as a waiting job.
      await deletions.add('reconcile', {}, { timestamp: now - 300_000, delay: 1000 });
      await maintenance.add('refresh-statistics', {}, { delay: 60_000 }); // not due yet

      const text = await metricsOf(api, '/metrics/global');
      expect(metricValue(text, 'bullmq_jobs', { queue: 'experiment-results', state: 'waiting' })).toBe(2);
      expect(metricValue(text, 'bullmq_jobs', { queue: 'deletions', state: 'delayed' })).toBe(1);
      expect(metricValue(text, 'bullmq_jobs', { queue: 'maintenance', state: 'delayed' })).toBe(1);
      const age = (queue: string) => metricValue(text, 'bullmq_oldest_waiting_job_age_seconds', { queue });
      expect(age('experiment-results')).toBeGreaterThanOrEqual(120);
      expect(age('experiment-results')).toBeLessThan(130);
      expect(age('deletions')).toBeGreaterThanOrEqual(299);
      expect(age('deletions')).toBeLessThan(309);
      expect(age('maintenance')).toBe(0);
      expect(metricValue(text, 'bullmq_job_completed_total', { queue: 'maintenance' })).toBe(0);
      expect(metricValue(text, 'workers_reporting')).toBe(0);
      expect(metricValue(text, 'metrics_source_up', { source: 'redis' })).toBe(1);
      expect(promtool(text)).toEqual({ status: 0, output: '' });
    },
  );

  it.skipIf(missingPackage('promtool'))(
    'shows deletion requests by status, the oldest open one and the longest-due one',
    async () => {
      const em = api.orm.em.fork();
      const request = async (mode: 'immediate' | 'weekly', key: string) =>
        (
          await recordDeletionRequests(em as any, [
            { projectId: account.projectId, type: 'person_events', mode, key, distinctIds: [key], createdById: null },
          ])
        )[0];
      const uuid = (n: number) => `00000000-0000-4000-8000-${String(n).padStart(12, '0')}`;
      const due = await request('immediate', uuid(1));
      const waitingForWindow = await request('weekly', uuid(2));
      const retryDue = await request('immediate', uuid(3));
      const running = await request('immediate', uuid(4));
      const done = await request('immediate', uuid(5));
      const set = (id: string, assignments: string) =>
        sql(api.orm, `update async_deletion set ${assignments} where id = ?`, [id]);
      const ago = (seconds: number) => `now() - make_interval(secs => ${seconds})`;
      await set(due, `created_at = ${ago(600)}`);
      await set(waitingForWindow, `created_at = ${ago(3000)}`);
      await set(retryDue, `status = 'failed', created_at = ${ago(900)}, next_attempt_at = ${ago(50)}`);
      await set(running, `status = 'running', created_at = ${ago(1200)}, lease_until = ${ago(-60)}`);
      await set(done, `status = 'completed', delete_verified_at = now(), created_at = ${ago(5000)}`);

      const text = await metricsOf(api, '/metrics/global');
      const byStatus = (status: string) => metricValue(text, 'deletion_requests', { status });
      expect([byStatus('pending'), byStatus('running'), byStatus('failed'), byStatus('completed')]).toEqual([
        2, 1, 1, 1,
      ]);
      const open = metricValue(text, 'deletion_oldest_open_request_age_seconds');
      expect(open).toBeGreaterThanOrEqual(3000); // the weekly one, waiting for its window
      expect(open).toBeLessThan(3010);
      const oldestDue = metricValue(text, 'deletion_oldest_due_request_age_seconds');
      expect(oldestDue).toBeGreaterThanOrEqual(600); // the immediate one; the failed one is due for 50 s only
      expect(oldestDue).toBeLessThan(610);
      expect(metricValue(text, 'metrics_source_up', { source: 'postgres' })).toBe(1);
      expect(promtool(text)).toEqual({ status: 0, output: '' });
    },
  );

  it('is the same from every replica: no sample names the process that served it', async () => {
    const [one, two] = [await metricsOf(api, '/metrics/global'), await metricsOf(replica, '/metrics/global')];
    const key = (s: { name: string; labels: Record<string, string> }) => `${s.name}${JSON.stringify(s.labels)}`;
    const first = new Map(samples(one).map((s) => [key(s), s.value]));
    const second = new Map(samples(two).map((s) => [key(s), s.value]));
    expect([...second.keys()].sort()).toEqual([...first.keys()].sort());
    for (const [series, value] of first) {
      // Ages move on between the two scrapes; everything else is equal.
      if (series.includes('_age_seconds')) expect(Math.abs(second.get(series)! - value)).toBeLessThan(2);
      else expect([series, second.get(series)]).toEqual([series, value]);
    }
    // The replica's own figures stay its own.
    const sent = await call(replica.baseUrl, 'POST', '/batch/', {
      body: { api_key: account.projectToken, batch: [{ event: 'replica', distinct_id: 'user', properties: {} }] },
    });
    expect(sent.status).toBe(200);
    const apiBefore = metricValue(await metricsOf(api), 'events_ingested_total');
    expect(metricValue(await metricsOf(replica), 'events_ingested_total')).toBe(1);
    expect(metricValue(await metricsOf(api), 'events_ingested_total')).toBe(apiBefore);
  });

  it('keeps the token: 401 without it', async () => {
    const res = await call(api.baseUrl, 'GET', '/metrics/global');
    expect(res.status).toBe(401);
    expect(res.body).toMatchObject({ type: 'authentication_error', code: 'not_authenticated', attr: null });
  });
});
