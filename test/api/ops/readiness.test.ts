// /_ready reports what works: PostgreSQL, Redis (a command and a queue operation), the throttle's
// use of Redis, the auth cache's listener; 503 when a needed part is down. Each failure is also
// visible in the metrics. Redis servers of this file's own, so stopping one disturbs no other file.
import { spawn, type ChildProcess } from 'node:child_process';
import { Redis } from 'ioredis';
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { migrate } from '../../../shared/platform/db/orm.ts';
import { logger } from '../../../shared/platform/logger.ts';
import { sql } from '../../db.ts';
import { call, eventually, ownDatabase, startApi, uniqueRedisPrefix, type TestApi } from '../../helpers.ts';
import { matching, metricValue, promtool, scrape } from './exposition.ts';
import { missingPackage } from '../../packages.ts';
import { freePort } from '../../services.ts';

const TOKEN = 'readiness-test-token';
const servers: ChildProcess[] = [];
const apis: TestApi[] = [];

afterEach(() => vi.restoreAllMocks());
afterAll(async () => {
  await Promise.all(apis.map((a) => a.close()));
  for (const server of servers) server.kill('SIGKILL');
});

async function ownRedis(): Promise<{ port: number; server: ChildProcess; admin: Redis }> {
  const port = await freePort();
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'];
  const server = spawn('redis-server', args, { stdio: 'ignore' });
  servers.push(server);
  const admin = await eventually(async () => {
    const client = new Redis({ port, lazyConnect: true, retryStrategy: () => null });
    client.on('error', () => undefined);
    return client.connect().then(
      () => client,
      () => {
        client.disconnect();
        return null;
      },
    );
  });
  return { port, server, admin };
}

async function api(overrides: (config: TestApi['config']) => void = () => undefined): Promise<TestApi> {
  const started = await startApi((config) => {
    config.redisPrefix = uniqueRedisPrefix();
    config.metricsToken = TOKEN;
    overrides(config);
  });
  apis.push(started);
  return started;
}

const ready = (target: TestApi) => call(target.baseUrl, 'GET', '/_ready');
async function metrics(target: TestApi, path = '/metrics'): Promise<string> {
  const res = await scrape(target.baseUrl, TOKEN, path);
  expect(res.status).toBe(200);
  return res.text;
}

describe('GET /_ready', () => {
  it('answers ok with every part checked, and says which parts are off by configuration', async () => {
    const full = await api((config) => {
      config.rateLimit.enabled = true;
      config.authCacheSeconds = 60;
    });
    const res = await eventually(async () => {
      const current = await ready(full);
      return current.status === 200 ? current : null;
    });
    expect(res.body).toEqual({
      status: 'ok',
      checks: { postgres: 'ok', redis: 'ok', queues: 'ok', throttle: 'ok', auth_cache: 'ok', migrations: 'ok' },
    });
    const plain = await api();
    await eventually(async () => (await ready(plain)).status === 200);
    expect((await ready(plain)).body.checks).toEqual({
      postgres: 'ok',
      redis: 'ok',
      queues: 'ok',
      throttle: 'disabled',
      auth_cache: 'disabled',
      migrations: 'ok',
    });
  });

  it('shows a Redis the throttle cannot use (readiness detail, metric, one log line), staying ready', async () => {
    const { port, admin } = await ownRedis();
    // A user that may run everything but INCR: PING and the queues work, the throttle's counters do not.
    await admin.call('ACL', 'SETUSER', 'app', 'on', '>app-secret', '~*', '&*', '+@all', '-incr');
    const warn = vi.spyOn(logger, 'warn');
    const info = vi.spyOn(logger, 'info');
    const target = await api((config) => {
      config.redisUrl = `redis://app:app-secret@127.0.0.1:${port}`;
      config.rateLimit.enabled = true;
    });
    const res = await eventually(async () => {
      const current = await ready(target);
      return current.body.checks.redis === 'ok' ? current : null;
    });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      status: 'degraded',
      checks: {
        postgres: 'ok',
        redis: 'ok',
        queues: 'ok',
        throttle: 'unavailable',
        auth_cache: 'disabled',
        migrations: 'ok',
      },
      details: { throttle: 'The rate limiter cannot use Redis: each API process counts requests on its own.' },
    });
    expect(metricValue(await metrics(target), 'throttle_redis_usable')).toBe(0);
    const said = (spy: typeof warn, text: string) => spy.mock.calls.filter((args) => args.includes(text)).length;
    expect(said(warn, 'throttle cannot use Redis: requests are rate limited per API process only')).toBe(1); // not once per probe

    await admin.call('ACL', 'SETUSER', 'app', '+incr');
    expect((await ready(target)).body).toMatchObject({ status: 'ok', checks: { throttle: 'ok' } });
    expect(metricValue(await metrics(target), 'throttle_redis_usable')).toBe(1);
    expect(said(info, 'throttle can use Redis again: requests are rate limited')).toBe(1);
    admin.disconnect();
  });

  it.skipIf(missingPackage('promtool'))(
    'answers 503 when Redis is stopped; /metrics and /metrics/global still answer with what they have',
    async () => {
      const { port, server, admin } = await ownRedis();
      admin.disconnect();
      const target = await api((config) => {
        config.redisUrl = `redis://127.0.0.1:${port}`;
        config.rateLimit.enabled = true;
      });
      await eventually(async () => (await ready(target)).status === 200);
      server.kill('SIGKILL');
      await new Promise((r) => server.once('exit', r));

      const down = await ready(target);
      expect(down.status).toBe(503);
      expect(down.body).toMatchObject({
        status: 'unavailable',
        checks: {
          postgres: 'ok',
          redis: 'unavailable',
          queues: 'unavailable',
          throttle: 'unavailable',
          auth_cache: 'disabled',
          migrations: 'ok',
        },
      });
      expect(Object.keys(down.body.details).sort()).toEqual(['queues', 'redis', 'throttle']);

      const own = await metrics(target);
      expect(metricValue(own, 'redis_connection_up')).toBe(0);
      expect(metricValue(own, 'throttle_redis_usable')).toBe(0);
      const global = await metrics(target, '/metrics/global');
      expect(metricValue(global, 'metrics_source_up', { source: 'redis' })).toBe(0);
      expect(metricValue(global, 'metrics_source_up', { source: 'postgres' })).toBe(1);
      // Left out, not reported as zero.
      expect(matching(global, 'bullmq_jobs')).toEqual([]);
      expect(matching(global, 'deletion_requests')).toHaveLength(5);
      expect(promtool(global)).toEqual({ status: 0, output: '' });
    },
  );

  it('answers 503 when PostgreSQL gives no connection, and the pool metrics show why', async () => {
    const target = await api((config) => {
      config.databasePoolMax = 1;
    });
    await eventually(async () => (await ready(target)).status === 200);
    let release!: () => void;
    let holding!: () => void;
    const inside = new Promise<void>((resolve) => (holding = resolve));
    const held = target.orm.em.fork().transactional(async (em) => {
      await em.getConnection().execute('select 1', [], 'all', em.getTransactionContext());
      holding();
      await new Promise<void>((resolve) => (release = resolve));
    });
    await inside;
    try {
      const down = await ready(target);
      expect(down.status).toBe(503);
      expect(down.body).toMatchObject({
        status: 'unavailable',
        checks: { postgres: 'unavailable', redis: 'ok', queues: 'ok' },
      });
      expect(down.body.details).toEqual({ postgres: 'PostgreSQL does not answer: requests cannot be served.' });
      const text = await metrics(target);
      expect(metricValue(text, 'db_pool_connections_in_use')).toBe(1);
      expect(metricValue(text, 'db_pool_connections_max')).toBe(1);
      expect(metricValue(text, 'db_pool_waiting_requests')).toBeGreaterThanOrEqual(1); // the readiness query
    } finally {
      release();
      await held;
    }
    await eventually(async () => (await ready(target)).status === 200);
  });

  it('shows the auth cache off while its listener is lost, and ok once it listens again', async () => {
    const target = await api((config) => {
      config.authCacheSeconds = 60;
    });
    await eventually(async () => (await ready(target)).body.status === 'ok');
    const [{ n }] = await sql(
      target.orm,
      `select count(pg_terminate_backend(pid))::int as n from pg_stat_activity
        where query = 'listen auth_changed' and datname = current_database() and pid <> pg_backend_pid()`,
    );
    expect(n).toBeGreaterThanOrEqual(1);
    // The listener comes back after a second: catch the moment it is off.
    const off = await eventually(
      async () => {
        const current = await ready(target);
        return current.body.checks.auth_cache === 'unavailable' ? current : null;
      },
      5000,
      20,
    );
    expect(off.status).toBe(200);
    expect(off.body).toMatchObject({
      status: 'degraded',
      details: { auth_cache: expect.stringContaining('auth_changed') },
    });
    await eventually(async () => (await ready(target)).body.checks.auth_cache === 'ok');
    expect(metricValue(await metrics(target), 'auth_cache_listening')).toBe(1);
  });

  it('is 503 on a database this version has not migrated, naming the command, and ready once it is', async () => {
    // A database of its own, created but not migrated (an API started before `npm run migrate`).
    const url = await ownDatabase('unmigrated', { migrated: false });
    const target = await api((config) => {
      config.databaseUrl = url;
      config.databaseDirectUrl = url;
    });
    // Redis connects just after the start; what is left then is the schema.
    const refused = await eventually(async () => {
      const current = await ready(target);
      return current.body.checks.redis === 'ok' ? current : null;
    });
    expect(refused.status).toBe(503);
    expect(refused.body).toEqual({
      status: 'unavailable',
      checks: {
        postgres: 'ok',
        redis: 'ok',
        queues: 'ok',
        throttle: 'disabled',
        auth_cache: 'disabled',
        migrations: 'unavailable',
      },
      details: { migrations: expect.stringContaining('npm run migrate') },
    });
    await migrate(target.orm, url);
    const res = await ready(target);
    expect(res.status).toBe(200);
    expect(res.body.checks.migrations).toBe('ok');
  });
});
