// The API and a worker on a real three-node Redis Cluster (REDIS_CLUSTER_NODES): deletion jobs run,
// the schedulers exist, and rate limiting answers 429. Before, the client was always a single-node
// one, BullMQ's keys had no hash tag (CROSSSLOT) and the throttle's MULTI failed silently.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import { initOrm } from '../../shared/platform/db/orm.ts';
import { createQueues } from '../../shared/platform/queues.ts';
import { createWorkerRedis, type RedisConnection } from '../../shared/platform/redis.ts';
import { sql } from '../db.ts';
import { call, createAccount, eventually, uniqueRedisPrefix, type TestAccount } from '../helpers.ts';
import { startApiProcess, startRedisCluster, startWorkerProcess, type ServiceProcess } from '../services.ts';

let cluster: Awaited<ReturnType<typeof startRedisCluster>>;
let api: Awaited<ReturnType<typeof startApiProcess>>;
let worker: ServiceProcess;
let orm: MikroORM;
let account: TestAccount;
let client: RedisConnection;
const prefix = uniqueRedisPrefix();

beforeAll(async () => {
  cluster = await startRedisCluster();
  const env = {
    REDIS_CLUSTER_NODES: cluster.nodes,
    REDIS_URL: 'redis://127.0.0.1:1',
    REDIS_PREFIX: prefix,
    RATE_LIMIT_PER_MINUTE: '5',
  };
  api = await startApiProcess(env);
  worker = startWorkerProcess({ ...env, DELETION_RECONCILE_SECONDS: '1' });
  orm = await initOrm(process.env.DATABASE_URL!);
  account = await createAccount(orm);
  client = createWorkerRedis({ url: 'redis://127.0.0.1:1', clusterNodes: cluster.nodes.split(',') });
  client.on('error', () => undefined);
}, 60_000);
afterAll(async () => {
  await worker?.stop();
  await api?.stop();
  client?.disconnect();
  await orm?.close();
  await cluster?.stop();
});

describe('on a Redis Cluster', () => {
  it('reports ready, keeps the schedulers and runs deletion jobs', async () => {
    const ready = await call(api.baseUrl, 'GET', '/_ready');
    expect(ready.status).toBe(200);
    const queues = createQueues(client, { redisPrefix: prefix, jobs: { attempts: 1, backoffMs: 0 } });
    try {
      await eventually(async () => (await queues.deletions.getJobSchedulers()).length === 2 || null, 30_000);
      const B = `/api/projects/${account.projectId}`;
      const batch = {
        api_key: account.projectToken,
        batch: [
          { event: '$snapshot', distinct_id: 'clustered', properties: { $session_id: 'c-1', $snapshot_data: {} } },
        ],
      };
      expect((await call(api.baseUrl, 'POST', '/batch/', { body: batch })).status).toBe(200);
      const person = (await call(api.baseUrl, 'GET', `${B}/persons/?distinct_id=clustered`, { key: account.apiKey }))
        .body.results[0];
      const res = await call(api.baseUrl, 'POST', `${B}/persons/${person.uuid}/delete_recordings/`, {
        key: account.apiKey,
      });
      expect(res.status).toBe(200);
      const id = res.body.deletion_requests[0].id;
      await eventually(
        async () => (await sql(orm, `select status from async_deletion where id = ?`, [id]))[0].status === 'completed',
        30_000,
      );
      // Run through the cluster's queue, not only by the reconciler's row: the job completes in BullMQ
      // just after the row commits, so wait for its state rather than reading it at once.
      const state = async () => (await queues.deletions.getJob(`deletion-${id}`))?.getState();
      await eventually(async () => ((await state()) === 'completed' ? true : null), 30_000);
    } finally {
      await Promise.allSettled(Object.values(queues).map((q) => q.close()));
    }
  });

  it('rate-limits: the sixth request in a minute is 429', async () => {
    // The counters are per calendar minute: a run counts when all six requests fell in one minute
    // (bracketed by this machine's clock, which the API shares); a run across a boundary is repeated
    // with a fresh key, and two runs cannot both straddle one.
    let statuses: number[] = [];
    for (let attempt = 0; attempt < 2; attempt++) {
      const key = (await createAccount(orm)).apiKey;
      const started = Date.now();
      statuses = [];
      for (let i = 0; i < 6; i++) statuses.push((await call(api.baseUrl, 'GET', '/api/users/@me/', { key })).status);
      if (Math.floor(started / 60_000) === Math.floor(Date.now() / 60_000)) break;
    }
    expect(statuses.slice(0, 5)).toEqual([200, 200, 200, 200, 200]);
    expect(statuses[5]).toBe(429);
    // Counted in the cluster, not in the process's own fallback counters (which would also answer 429).
    expect((await call(api.baseUrl, 'GET', '/_ready')).body.checks.throttle).toBe('ok');
  });
});
