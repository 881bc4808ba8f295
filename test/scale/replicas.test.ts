// Two API processes and two workers on the same PostgreSQL and Redis, as behind a load balancer.
// - A key revoked in one place is refused by every API within a stated bound (README: Scaling).
// - A batch of deletions is done once: every job runs once (none re-run by a reconciler), every
//   event goes, and the rows deleted add up.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import { Redis } from 'ioredis';
import { initOrm } from '../../shared/platform/db/orm.ts';
import { createQueues } from '../../shared/platform/queues.ts';
import { pgArray } from '../../shared/platform/db/sql.ts';
import { sql } from '../db.ts';
import { call, createAccount, createKeyWithId, eventually, uniqueRedisPrefix, type TestAccount } from '../helpers.ts';
import { startApiProcess, startWorkerProcess, type ServiceProcess } from '../services.ts';

/** The bound README states for revocation on the other API processes. */
const REVOCATION_BOUND_MS = 1000;

let apis: Awaited<ReturnType<typeof startApiProcess>>[] = [];
let workers: ServiceProcess[] = [];
let orm: MikroORM;
let account: TestAccount;
let redis: Redis;
let queues: ReturnType<typeof createQueues>;

beforeAll(async () => {
  const prefix = uniqueRedisPrefix();
  redis = new Redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', { maxRetriesPerRequest: null });
  queues = createQueues(redis, { redisPrefix: prefix, jobs: { attempts: 1, backoffMs: 0 } });
  const env = { REDIS_PREFIX: prefix, RATE_LIMIT_ENABLED: 'false', AUTH_CACHE_SECONDS: '300' };
  apis = await Promise.all([startApiProcess(env), startApiProcess(env)]);
  const workerEnv = { ...env, DELETION_RECONCILE_SECONDS: '1', LOG_LEVEL: 'info', DELETION_CHUNK_SIZE: '50' };
  workers = [startWorkerProcess(workerEnv), startWorkerProcess(workerEnv)];
  orm = await initOrm(process.env.DATABASE_URL!);
  account = await createAccount(orm);
}, 200_000);
afterAll(async () => {
  await Promise.all([...workers, ...apis].map((p) => p.stop()));
  await Promise.allSettled(Object.values(queues ?? {}).map((q) => q.close()));
  redis?.disconnect();
  await orm?.close();
});

describe('replicas', () => {
  it(`refuses a revoked key on every API within ${REVOCATION_BOUND_MS} ms`, async () => {
    const path = `/api/projects/${account.projectId}/persons/?limit=1`;
    const delays: number[] = [];
    for (let round = 0; round < 10; round++) {
      const { id, value: key } = await createKeyWithId(orm, account.userId, { scopes: ['person:read'] });
      for (const api of apis) expect((await call(api.baseUrl, 'GET', path, { key })).status).toBe(200); // cached in both
      await sql(orm, `delete from personal_api_key where id = ?`, [id]);
      const committed = Date.now();
      // Each process learns of the change by notification (README: Scaling): ask each until it refuses,
      // the one that did not serve the request last first.
      for (const api of round % 2 ? [apis[1], apis[0]] : apis) {
        await eventually(async () => (await call(api.baseUrl, 'GET', path, { key })).status === 401 || null, 5_000, 1);
        delays.push(Date.now() - committed);
      }
    }
    console.log(`revocation reached the other API after ${delays.join(', ')} ms`);
    expect(Math.max(...delays)).toBeLessThanOrEqual(REVOCATION_BOUND_MS);
  });

  it('does a bulk deletion once with two workers: every request counted once, nothing left, every job done', async () => {
    const ids = Array.from({ length: 20 }, () => `replica-${randomUUID().slice(0, 8)}`);
    const batch = ids.flatMap((id) =>
      Array.from({ length: 30 }, () => ({ event: 'e', distinct_id: id, properties: {} })),
    );
    expect(
      (await call(apis[0].baseUrl, 'POST', '/batch/', { body: { api_key: account.projectToken, batch } })).status,
    ).toBe(200);
    const bulk = await call(apis[1].baseUrl, 'POST', `/api/projects/${account.projectId}/persons/bulk_delete/`, {
      key: account.apiKey,
      body: { distinct_ids: ids, delete_events: true },
    });
    expect(bulk.status).toBe(200);
    const requestIds: string[] = bulk.body.deletion_requests.map((r: { id: string }) => r.id);
    expect(requestIds).toHaveLength(20);
    await sql(orm, `update async_deletion set released_at = now() where id = any(?::bigint[])`, [pgArray(requestIds)]);
    // The workers' reconcilers (every second) hand the released requests to the queue.
    const done = await eventually(async () => {
      const rows = await sql(orm, `select status, rows_deleted from async_deletion where id = any(?::bigint[])`, [
        pgArray(requestIds),
      ]);
      return rows.every((r) => r.status === 'completed') ? rows : null;
    }, 60_000);
    expect(done.reduce((sum, r) => sum + Number(r.rows_deleted), 0)).toBe(600);
    const [left] = await sql(
      orm,
      `select count(*)::int as n from event where project_id = ? and distinct_id = any(?::text[])`,
      [account.projectId, pgArray(ids)],
    );
    expect(left.n).toBe(0);
    // Nothing left to run: each request's job has finished, or was removed unrun by the lead that completed
    // its request (a re-run would be one of the finished ones).
    const states = await eventually(async () => {
      const found = await Promise.all(
        requestIds.map(async (id) => (await queues.deletions.getJob(`deletion-${id}`))?.getState() ?? 'removed'),
      );
      return found.every((state) => state === 'completed' || state === 'removed') ? found : null;
    }, 30_000);
    const completed = requestIds.filter((_, i) => states[i] === 'completed').map((id) => `deletion-${id}`);
    expect(completed.length).toBeGreaterThan(0); // the lead's own, at least
    // A job is completed in Redis before its worker's log line reaches this process through the pipe
    // (at load 10 six of twenty were still on their way): wait for every completed job's line, then count.
    const finishedRuns = () =>
      workers
        .flatMap((w) => w.output().split('\n'))
        .filter((l) => l.includes('"msg":"job finished"') && l.includes('"job":"delete"'))
        .map((l) => JSON.parse(l).jobId as string)
        .filter((jobId) => requestIds.includes(jobId.replace('deletion-', '')));
    await eventually(async () => completed.every((jobId) => finishedRuns().includes(jobId)) || null, 30_000);
    // A job may run again as a no-op (its request found done by one read): the work itself happened once,
    // one receipt per request and the rows counted exactly once above.
    const [receipts] = await sql(
      orm,
      `select count(*)::int as n from deletion_receipt where request_id = any(?::bigint[])`,
      [pgArray(requestIds)],
    );
    expect(receipts.n).toBe(20);
  }, 90_000);
});
