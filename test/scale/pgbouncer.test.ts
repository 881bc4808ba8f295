// The API and a worker behind PgBouncer in transaction pooling mode (Debian's package, started
// here): every resource answers, a deletion is processed, and a key revoked with `npm run manage`
// (also through the pooler) is refused on the next request, because the auth cache LISTENs on
// DATABASE_DIRECT_URL. Before, every request was a 500 (PgBouncer refuses the `options` startup
// parameter the service sent), and with that ignored, the LISTEN was lost in the pool.
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import { initOrm } from '../../shared/platform/db/orm.ts';
import { sql } from '../db.ts';
import { call, createAccount, eventually, uniqueRedisPrefix, type TestAccount } from '../helpers.ts';
import { root, startApiProcess, startPgBouncer, startWorkerProcess, type ServiceProcess } from '../services.ts';
import { missingPackage } from '../packages.ts';

const database = new URL(process.env.DATABASE_URL!).pathname.slice(1);
let bouncer: Awaited<ReturnType<typeof startPgBouncer>>;
let api: Awaited<ReturnType<typeof startApiProcess>>;
let worker: ServiceProcess;
let orm: MikroORM;
let account: TestAccount;
let env: Record<string, string>;

beforeAll(async () => {
  if (missingPackage('pgbouncer')) return;
  bouncer = await startPgBouncer();
  env = {
    DATABASE_URL: bouncer.url(database),
    DATABASE_DIRECT_URL: process.env.DATABASE_URL!,
    REDIS_PREFIX: uniqueRedisPrefix(),
    RATE_LIMIT_ENABLED: 'false',
    AUTH_CACHE_SECONDS: '300',
  };
  api = await startApiProcess(env);
  worker = startWorkerProcess({ ...env, DELETION_RECONCILE_SECONDS: '1' });
  orm = await initOrm(process.env.DATABASE_URL!);
  account = await createAccount(orm);
});
afterAll(async () => {
  await worker?.stop();
  await api?.stop();
  await orm?.close();
  await bouncer?.stop();
});

describe.skipIf(missingPackage('pgbouncer'))('behind PgBouncer (transaction pooling)', () => {
  it('serves every resource and processes deletions', async () => {
    const B = `/api/projects/${account.projectId}`;
    const key = account.apiKey;
    const ok = async (method: string, path: string, body?: unknown) => {
      const res = await call(api.baseUrl, method, path, { key, body });
      expect(res.status, `${method} ${path}: ${res.text}\n${api.output()}`).toBeLessThan(300);
      return res.body;
    };
    const batch = {
      api_key: account.projectToken,
      batch: [{ event: 'signed up', distinct_id: 'pooled', properties: { $set: { email: 'p@example.com' } } }],
    };
    expect((await call(api.baseUrl, 'POST', '/batch/', { body: batch })).status).toBe(200);
    await ok('GET', '/api/projects/');
    const person = (await ok('GET', `${B}/persons/?distinct_id=pooled`)).results[0];
    expect(person.properties.email).toBe('p@example.com');
    await ok('GET', `${B}/persons/${person.uuid}/`);
    await ok('PATCH', `${B}/persons/${person.uuid}/`, { properties: { plan: 'pro' } });
    const experiment = await ok('POST', `${B}/experiments/`, {
      name: 'Pooled',
      feature_flag_key: `pooled-${randomUUID().slice(0, 6)}`,
    });
    await ok('PATCH', `${B}/experiments/${experiment.id}/`, { start_date: new Date().toISOString() });
    await ok('GET', `${B}/experiments/${experiment.id}/`);
    await ok('GET', `${B}/event_definitions/?search=signed`);
    await ok('POST', `${B}/experiment_holdouts/`, { name: 'h', filters: [{ properties: [], rollout_percentage: 10 }] });
    const flags = await fetch(`${api.baseUrl}/flags/?v=2`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ token: account.projectToken, distinct_id: 'pooled' }),
    });
    expect(flags.status).toBe(200);
    expect(Object.keys((await flags.json()).flags)).toContain(experiment.feature_flag_key);

    const request = (await ok('POST', `${B}/persons/${person.uuid}/delete_events/`)).deletion_requests[0];
    const run = await execFileAsync(['scripts/manage.ts', 'deletion', 'run-window', '--mode', 'off_peak', '--json']);
    expect(run.code, run.stderr).toBe(0);
    await eventually(
      async () =>
        (await sql(orm, `select status from async_deletion where id = ?`, [request.id]))[0].status === 'completed',
      30_000,
    );
    expect(
      (
        await sql(orm, `select count(*)::int as n from event where project_id = ? and distinct_id = 'pooled'`, [
          account.projectId,
        ])
      )[0].n,
    ).toBe(0);
  });

  it('refuses a key revoked with npm run manage on the very next request', async () => {
    const path = `/api/projects/${account.projectId}/persons/`;
    for (let i = 0; i < 3; i++)
      expect((await call(api.baseUrl, 'GET', path, { key: account.apiKey })).status).toBe(200); // cached now
    const [{ id }] = await sql(orm, `select id::text from personal_api_key where user_id = ?`, [account.userId]);
    const revoked = await execFileAsync(['scripts/manage.ts', 'key', 'revoke', '--key', id, '--json']);
    expect(revoked.code, revoked.stderr).toBe(0);
    expect((await call(api.baseUrl, 'GET', path, { key: account.apiKey })).status).toBe(401);
  });
});

function execFileAsync(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      args,
      { cwd: root, env: { ...process.env, ...env, LOG_LEVEL: 'silent' } },
      (error, stdout, stderr) => resolve({ code: error ? Number(error.code ?? 1) : 0, stdout, stderr }),
    );
  });
}
