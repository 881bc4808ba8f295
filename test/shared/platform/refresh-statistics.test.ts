// The statistics job: tables that changed since their last ANALYZE get one, through the queue.
import { describe, expect, it } from 'vitest';
import { defaultSchedules } from '../../../shared/platform/schedules.ts';
import { loadConfig } from '../../../shared/platform/config.ts';
import { sql } from '../../db.ts';
import { eventually, ownDatabase, settledJob, workerWithAccount } from '../../helpers.ts';

// Its own database: in a shared one, another file's worker may ANALYZE `person` first, and then this
// job rightly skips it.
const url = await ownDatabase('statistics');
const { worker, account } = await workerWithAccount((config) => {
  config.databaseUrl = url;
  config.databaseDirectUrl = url;
});

const runJob = async (data: Record<string, unknown>) =>
  settledJob(worker.deps.queues.maintenance, await worker.deps.queues.maintenance.add('refresh-statistics', data));

const lastAnalyze = async (table: string) =>
  Number(
    (
      await sql(
        worker.deps.orm,
        `select coalesce(extract(epoch from last_analyze), 0) * 1000 as ms from pg_stat_user_tables where relname = ? and schemaname = current_schema()`,
        [table],
      )
    )[0].ms,
  );

describe('statistics refresh job', () => {
  it('is scheduled every five minutes by default', () => {
    const schedule = defaultSchedules(loadConfig()).find((s) => s.schedulerId === 'statistics-refresh')!;
    expect(schedule).toMatchObject({ job: 'refreshStatistics', pattern: '*/5 * * * *' });
  });

  it('analyzes the tables that changed, and skips them below the threshold', async () => {
    await sql(
      worker.deps.orm,
      `insert into person (uuid, project_id, properties) select gen_random_uuid(), ?, '{}' from generate_series(1, 20)`,
      [account.projectId],
    );
    const before = await lastAnalyze('person');
    // The inserting backend reports its changes to the statistics when it goes idle.
    await eventually(
      async () =>
        (
          await sql(
            worker.deps.orm,
            `select n_mod_since_analyze::int as n from pg_stat_user_tables
              where relname = 'person' and schemaname = current_schema()`,
          )
        )[0].n >= 20,
    );

    // A threshold no table reaches: nothing is analyzed (nor vacuumed).
    expect((await runJob({ minChangedRows: 1e12, minDeadRows: 1e12 })).returnvalue).toEqual({
      analyzed: [],
      vacuumed: [],
    });

    const { analyzed } = (await runJob({ minChangedRows: 1 })).returnvalue;
    expect(analyzed).toContain('person');
    expect(await lastAnalyze('person')).toBeGreaterThan(before);
  });

  it('fails at once, without retries, on a malformed threshold', async () => {
    const job = await runJob({ minChangedRows: 'lots' }); // settled means failed, not delayed for a retry
    expect(await job.isFailed()).toBe(true);
    expect(job.failedReason).toBe('invalid minChangedRows "lots"');
  });
});
