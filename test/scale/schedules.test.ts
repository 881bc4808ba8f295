// One source of truth for schedules: the record in PostgreSQL. A worker started with a different
// DELETION_WEEKLY_CRON follows the record and says so, instead of re-scheduling every worker; a
// change through `npm run manage -- schedule set` reaches every worker on its next reconcile.
import { execFile } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import { Redis } from 'ioredis';
import { initOrm } from '../../shared/platform/db/orm.ts';
import { createQueues } from '../../shared/platform/queues.ts';
import { defaultSchedules, recordedSchedules } from '../../shared/platform/schedules.ts';
import { loadConfig } from '../../shared/platform/config.ts';
import { eventually, uniqueRedisPrefix } from '../helpers.ts';
import { root, startWorkerProcess, type ServiceProcess } from '../services.ts';

const prefix = uniqueRedisPrefix();
let orm: MikroORM;
let redis: Redis;
let queues: ReturnType<typeof createQueues>;
const workers: ServiceProcess[] = [];
let recordedWeekly: string;

beforeAll(async () => {
  orm = await initOrm(process.env.DATABASE_URL!);
  const { schedules } = await recordedSchedules(orm.em.fork() as any, defaultSchedules(loadConfig()));
  recordedWeekly = schedules.find((s) => s.schedulerId === 'deletion-weekly-batch')!.pattern;
  redis = new Redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', { maxRetriesPerRequest: null });
  queues = createQueues(redis, { redisPrefix: prefix, jobs: { attempts: 1, backoffMs: 0 } });
});
afterAll(async () => {
  await Promise.all(workers.map((w) => w.stop()));
  // Leave the record as this file found it: other files' workers follow it.
  await manage('schedule', 'set', '--id', 'deletion-weekly-batch', '--cron', recordedWeekly);
  await Promise.allSettled(Object.values(queues).map((q) => q.close()));
  redis.disconnect();
  await orm.close();
});

function manage(...args: string[]): Promise<{ code: number; json: any; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ['scripts/manage.ts', ...args, '--json'],
      { cwd: root, env: { ...process.env, LOG_LEVEL: 'silent' } },
      (error, stdout, stderr) => {
        let json: any = null;
        try {
          json = JSON.parse(stdout);
        } catch {}
        resolve({ code: error ? Number(error.code ?? 1) : 0, json, stderr });
      },
    );
  });
}

const weeklyPattern = async () => (await queues.deletions.getJobScheduler('deletion-weekly-batch'))?.pattern ?? null;

describe('schedules', () => {
  it('a worker whose setting disagrees follows the record and says so; schedule set reaches every worker', async () => {
    const mine = recordedWeekly === '0 6 * * 6' ? '0 7 * * 6' : '0 6 * * 6';
    const env = { REDIS_PREFIX: prefix, DELETION_RECONCILE_SECONDS: '1', LOG_LEVEL: 'warn' };
    workers.push(startWorkerProcess(env));
    workers.push(startWorkerProcess({ ...env, DELETION_WEEKLY_CRON: mine }));
    await eventually(async () => (await weeklyPattern()) === recordedWeekly, 30_000);
    const dissenter = workers[1];
    await eventually(
      async () => dissenter.output().includes(`DELETION_WEEKLY_CRON here is \\"${mine}\\"`) || null,
      30_000,
    );
    expect(await weeklyPattern()).toBe(recordedWeekly); // not re-scheduled by the last to start

    const set = await manage('schedule', 'set', '--id', 'deletion-weekly-batch', '--cron', '0 4 * * 1');
    expect(set.code, set.stderr).toBe(0);
    await eventually(async () => (await weeklyPattern()) === '0 4 * * 1', 30_000);
    const listed = await manage('schedule', 'list');
    expect(listed.json).toContainEqual(expect.objectContaining({ id: 'deletion-weekly-batch', cron: '0 4 * * 1' }));

    const bad = await manage('schedule', 'set', '--id', 'deletion-weekly-batch', '--cron', '0 4 * * 9');
    expect(bad.code).toBe(1);
    expect(bad.stderr).toContain('Invalid cron pattern');
    expect((await manage('schedule', 'set', '--id', 'nope', '--cron', '* * * * *')).stderr).toContain(
      'Unknown schedule nope',
    );
  }, 90_000);
});
