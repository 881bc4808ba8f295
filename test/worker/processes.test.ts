// Real worker processes (node worker/main.ts): one killed with SIGKILL mid-deletion is finished by
// another with nothing left and nothing counted twice; two processes never process one request twice.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { recordDeletionRequests } from '../../shared/deletions/store.ts';
import { pgArray } from '../../shared/platform/db/sql.ts';
import { enqueueDeletions } from '../../shared/platform/queues.ts';
import { sql } from '../db.ts';
import { createAccount, eventually, startApi, uniqueRedisPrefix, type TestAccount, type TestApi } from '../helpers.ts';
import { freePort } from '../services.ts';

const root = fileURLToPath(new URL('../..', import.meta.url));
const prefix = uniqueRedisPrefix();
let api: TestApi;
let account: TestAccount;
const children: ChildProcess[] = [];

function startWorkerProcess(env: Record<string, string> = {}): ChildProcess {
  const child = spawn(process.execPath, ['worker/main.ts'], {
    cwd: root,
    env: {
      ...process.env,
      REDIS_PREFIX: prefix,
      LOG_LEVEL: 'silent',
      WORKER_LOCK_DURATION_MS: '2000',
      DELETION_LEASE_SECONDS: '2',
      DELETION_RECONCILE_SECONDS: '1', // so takeovers are quick in the test
      ...env,
    },
    stdio: 'ignore',
  });
  children.push(child);
  return child;
}

beforeAll(async () => {
  api = await startApi((config) => {
    config.redisPrefix = prefix;
  });
  account = await createAccount(api.orm);
});
afterAll(async () => {
  for (const child of children) child.kill('SIGKILL');
  await api.close();
});

/** Inserts `n` events for a person (fast, straight SQL) and returns its uuid. */
async function seedPerson(distinctId: string, n: number): Promise<string> {
  const uuid = randomUUID();
  await sql(
    api.orm,
    `insert into event (uuid, project_id, event, distinct_id, person_id, properties, timestamp, created_at)
     select gen_random_uuid(), ?, 'bulk', ?, ?::uuid, '{}'::jsonb, now() - make_interval(secs => g), now() - interval '1 minute'
       from generate_series(1, ?) g`,
    [account.projectId, distinctId, uuid, n],
  );
  return uuid;
}

async function request(uuid: string, distinctId: string): Promise<string> {
  const em = api.orm.em.fork();
  const [id] = await recordDeletionRequests(em as any, [
    {
      projectId: account.projectId,
      type: 'person_events',
      mode: 'immediate',
      key: uuid,
      distinctIds: [distinctId],
      createdById: null,
    },
  ]);
  return id;
}
const row = async (id: string) => (await sql(api.orm, `select * from async_deletion where id = ?`, [id]))[0];

describe('worker processes', () => {
  it('refuses to start with a malformed setting, naming it', async () => {
    const child = spawn(process.execPath, ['worker/main.ts'], {
      cwd: root,
      env: { ...process.env, REDIS_PREFIX: prefix, DELETION_CHUNK_SIZE: 'lots' },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    child.stderr!.on('data', (chunk) => (stderr += chunk));
    const code = await new Promise((r) => child.once('exit', r));
    expect(code).not.toBe(0);
    expect(stderr).toContain('DELETION_CHUNK_SIZE must be an integer, got "lots"');
  });

  it('finishes a deletion whose worker was killed with SIGKILL mid-way, deleting nothing extra', async () => {
    const victim = await seedPerson('kill-victim', 20_000);
    const bystander = await seedPerson('kill-bystander', 500);
    const id = await request(victim, 'kill-victim');
    const first = startWorkerProcess({ DELETION_CHUNK_SIZE: '200' });
    await enqueueDeletions(api.deps.queues.deletions, [id]);
    await eventually(async () => Number((await row(id)).rows_deleted) > 0, 30_000, 20);
    first.kill('SIGKILL');
    await new Promise((r) => first.once('exit', r));
    const mid = await row(id);
    expect(mid.status).toBe('running');
    expect(Number(mid.rows_deleted)).toBeLessThan(20_000);

    startWorkerProcess({ DELETION_CHUNK_SIZE: '2000' });
    const done = await eventually(async () => ((await row(id)).status === 'completed' ? row(id) : null), 60_000, 200);
    expect(Number(done.rows_deleted)).toBe(20_000); // every chunk counted exactly once
    const [left] = await sql(api.orm, `select count(*)::int as n from event where project_id = ? and person_id = ?`, [
      account.projectId,
      victim,
    ]);
    expect(left.n).toBe(0);
    const [kept] = await sql(api.orm, `select count(*)::int as n from event where project_id = ? and person_id = ?`, [
      account.projectId,
      bystander,
    ]);
    expect(kept.n).toBe(500);
  }, 120_000);

  it('serves job metrics and, on SIGTERM, exits within its shutdown limit, leaving the job to another worker', async () => {
    // Only this test's worker may take the job: stop the ones earlier tests left running.
    await Promise.all(
      children.splice(0).map(
        (c) =>
          new Promise((r) => {
            if (c.exitCode !== null || c.signalCode !== null) return r(null);
            c.once('exit', r);
            c.kill('SIGKILL');
          }),
      ),
    );
    const victim = await seedPerson('term-victim', 100_000);
    const id = await request(victim, 'term-victim');
    const metricsPort = await freePort();
    // 10,000 chunks of 10: on a calm machine 1,000 chunks of 100 all fitted in the second between the
    // first chunk and the shutdown limit, and the job completed before it could be left to another worker.
    const first = startWorkerProcess({
      DELETION_CHUNK_SIZE: '10',
      WORKER_SHUTDOWN_TIMEOUT_MS: '1000',
      WORKER_METRICS_PORT: String(metricsPort),
    });
    await enqueueDeletions(api.deps.queues.deletions, [id]);
    await eventually(async () => Number((await row(id)).rows_deleted) > 0, 30_000, 20);
    const metrics = await eventually(() =>
      fetch(`http://127.0.0.1:${metricsPort}/metrics`).then(
        (r) => r.text(),
        () => '',
      ),
    );
    expect(metrics).toContain('# TYPE worker_job_duration_seconds histogram');
    const stopped = Date.now();
    first.kill('SIGTERM');
    const code = await new Promise((r) => first.once('exit', (c) => r(c)));
    expect(Date.now() - stopped).toBeLessThan(8_000);
    expect(code).toBe(0);
    expect((await row(id)).status).toBe('running'); // stopped mid-way, not run to the end
    startWorkerProcess({ DELETION_CHUNK_SIZE: '5000' });
    const done = await eventually(async () => ((await row(id)).status === 'completed' ? row(id) : null), 60_000, 200);
    expect(Number(done.rows_deleted)).toBe(100_000);
  }, 120_000);

  it.each(['SIGTERM', 'SIGINT'] as const)(
    'exits within its shutdown limit on %s while Redis cannot be reached',
    async (signal) => {
      // Nothing listens on this port: every Redis command of the worker waits for a connection.
      const child = spawn(process.execPath, ['worker/main.ts'], {
        cwd: root,
        env: {
          ...process.env,
          REDIS_URL: `redis://127.0.0.1:${await freePort()}`,
          REDIS_PREFIX: prefix,
          LOG_LEVEL: 'warn',
          WORKER_SHUTDOWN_TIMEOUT_MS: '1000',
          WORKER_METRICS_PORT: String(await freePort()),
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      children.push(child);
      let output = '';
      child.stdout!.on('data', (chunk) => (output += chunk));
      child.stderr!.on('data', (chunk) => (output += chunk));
      const exited = new Promise<{ code: number | null; signal: string | null }>((r) =>
        child.once('exit', (code, sig) => r({ code, signal: sig })),
      );
      // Up (its signal handlers are set before it first connects) and failing to reach Redis.
      await eventually(async () => output.includes('redis connection error'), 60_000, 50);
      const sent = Date.now();
      child.kill(signal);
      const outcome = await Promise.race([exited, new Promise((r) => setTimeout(() => r('still running'), 20_000))]);
      // 1 s of shutdown limit plus the closing of PostgreSQL, with room for a busy machine.
      expect(outcome, output).toEqual({ code: 0, signal: null });
      expect(Date.now() - sent).toBeLessThan(10_000);
    },
    90_000,
  );

  it('two worker processes never both process one request', async () => {
    startWorkerProcess({ WORKER_CONCURRENCY: '4' });
    startWorkerProcess({ WORKER_CONCURRENCY: '4' });
    const requests: { id: string; uuid: string }[] = [];
    for (let i = 0; i < 8; i++) {
      const uuid = await seedPerson(`pair-${i}`, 300);
      requests.push({ id: await request(uuid, `pair-${i}`), uuid });
    }
    await enqueueDeletions(
      api.deps.queues.deletions,
      requests.map((r) => r.id),
    );
    await enqueueDeletions(
      api.deps.queues.deletions,
      requests.map((r) => r.id),
    ); // a duplicate enqueue is ignored
    let deleted = 0;
    for (const r of requests) {
      const done = await eventually(
        async () => ((await row(r.id)).status === 'completed' ? row(r.id) : null),
        60_000,
        200,
      );
      expect(done.attempts).toBe(1);
      deleted += Number(done.rows_deleted); // on the row of whichever request led its batch
    }
    expect(deleted).toBe(8 * 300);
    const [left] = await sql(
      api.orm,
      `select count(*)::int as n from event where project_id = ? and person_id = any(?::uuid[])`,
      [account.projectId, pgArray(requests.map((r) => r.uuid))],
    );
    expect(left.n).toBe(0);
  }, 120_000);
});
