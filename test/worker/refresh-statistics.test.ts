// The statistics job: tables that changed since their last ANALYZE get one, through the queue.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { schedules } from '../../worker/jobs/index.ts';
import { sql } from '../db.ts';
import { createAccount, eventually, startTestWorker, uniqueRedisPrefix, type TestAccount } from '../helpers.ts';

let worker: Awaited<ReturnType<typeof startTestWorker>>;
let account: TestAccount;

beforeAll(async () => {
  worker = await startTestWorker(uniqueRedisPrefix());
  account = await createAccount(worker.deps.orm);
});
afterAll(async () => {
  await worker.close();
});

const lastAnalyze = async (table: string) =>
  Number((await sql(worker.deps.orm, `select coalesce(extract(epoch from last_analyze), 0) * 1000 as ms from pg_stat_user_tables where relname = ? and schemaname = current_schema()`, [table]))[0].ms);

describe('statistics refresh job', () => {
  it('is scheduled every five minutes by default', () => {
    const schedule = schedules({}).find((s) => s.schedulerId === 'statistics-refresh')!;
    expect(schedule).toMatchObject({ queue: 'maintenance', jobName: 'refresh-statistics', pattern: '*/5 * * * *' });
  });

  it('analyzes the tables that changed, and skips them below the threshold', async () => {
    await sql(worker.deps.orm, `insert into person (uuid, project_id, properties) select gen_random_uuid(), ?, '{}' from generate_series(1, 20)`, [account.projectId]);
    const before = await lastAnalyze('person');

    // A threshold no table reaches: nothing is analyzed.
    const idle = await worker.deps.queues.maintenance.add('refresh-statistics', { minChangedRows: 1e12 });
    await eventually(async () => (await idle.isCompleted()) || null);
    expect((await worker.deps.queues.maintenance.getJob(idle.id!))!.returnvalue).toEqual({ analyzed: [] });

    const job = await worker.deps.queues.maintenance.add('refresh-statistics', { minChangedRows: 1 });
    await eventually(async () => (await job.isCompleted()) || null);
    const { analyzed } = (await worker.deps.queues.maintenance.getJob(job.id!))!.returnvalue;
    expect(analyzed).toContain('person');
    expect(await lastAnalyze('person')).toBeGreaterThan(before);
  });

  it('fails at once, without retries, on a malformed threshold', async () => {
    const job = await worker.deps.queues.maintenance.add('refresh-statistics', { minChangedRows: 'lots' });
    await eventually(async () => (await job.isFailed()) || null); // failed, not delayed for a retry
    expect((await worker.deps.queues.maintenance.getJob(job.id!))!.failedReason).toBe('invalid minChangedRows "lots"');
  });
});
