// Monthly event partitions: the migration creates this month's and the next two; the daily job
// adds months ahead and moves rows the default partition already holds for a new month, and purges
// ingestion warnings past their 30 days.
import { describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import { defaultSchedules } from '../../../shared/platform/schedules.ts';
import { loadConfig } from '../../../shared/platform/config.ts';
import { firstMonthlyPartitionStart } from '../../../shared/events/store.ts';
import { sql } from '../../db.ts';
import { pgArray } from '../../../shared/platform/db/sql.ts';
import { createAccount, settledJob, workerWithAccount } from '../../helpers.ts';

const { worker, account } = await workerWithAccount();

/** The partition holding the event `uuid`. */
const partitionOf = async (uuid: string) =>
  (
    await sql(worker.deps.orm, `select tableoid::regclass::text as name from event where project_id = ? and uuid = ?`, [
      account.projectId,
      uuid,
    ])
  )[0]?.name;

const monthName = (date: Date) => `event_y${date.getUTCFullYear()}m${String(date.getUTCMonth() + 1).padStart(2, '0')}`;
const monthsFromNow = (n: number) => {
  const now = new Date();
  return new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + n, 15));
};

const runJob = async (data: Record<string, unknown>) =>
  settledJob(worker.deps.queues.maintenance, await worker.deps.queues.maintenance.add('ensure-event-partitions', data));

describe('event partitions', () => {
  it('is scheduled daily at 01:00 UTC by default', () => {
    expect(defaultSchedules(loadConfig()).find((s) => s.schedulerId === 'event-partitions')).toMatchObject({
      job: 'ensureEventPartitions',
      pattern: '0 1 * * *',
    });
  });

  it('stores an event of this month in this month’s partition, and an old one in the default partition', async () => {
    const recent = randomUUID();
    const old = randomUUID();
    await sql(
      worker.deps.orm,
      `insert into event (uuid, project_id, event, distinct_id, timestamp) values (?, ?, 'pageview', 'a', now()), (?, ?, 'pageview', 'a', '2001-02-03T00:00:00Z')`,
      [recent, account.projectId, old, account.projectId],
    );
    expect(await partitionOf(recent)).toBe(monthName(new Date()));
    expect(await partitionOf(old)).toBe('event_default');
  });

  it('creates months ahead, moving the events the default partition held for them, and is a no-op when run again', async () => {
    // The migration made this month and the next two; the fourth is the job's to make. Dropped
    // again at the end, so every run starts without it.
    const target = monthsFromNow(3);
    const dropTarget = async () => {
      const [{ exists }] = await sql(worker.deps.orm, `select to_regclass(?) is not null as exists`, [
        monthName(target),
      ]);
      if (exists)
        await sql(
          worker.deps.orm,
          `alter table event detach partition ${monthName(target)}; drop table ${monthName(target)}`,
        );
    };
    await dropTarget();
    try {
      const uuid = randomUUID();
      await sql(
        worker.deps.orm,
        `insert into event (uuid, project_id, event, distinct_id, timestamp) values (?, ?, 'future', 'a', ?)`,
        [uuid, account.projectId, target.toISOString()],
      );
      expect(await partitionOf(uuid)).toBe('event_default');

      const job = await runJob({ monthsAhead: 3 });
      expect(job.returnvalue.created).toContain(monthName(target));
      expect(await partitionOf(uuid)).toBe(monthName(target));
      const [{ n }] = await sql(worker.deps.orm, `select count(*)::int as n from event_default where uuid = ?`, [uuid]);
      expect(n).toBe(0);

      expect((await runJob({ monthsAhead: 3 })).returnvalue).toMatchObject({ created: [] });
    } finally {
      await dropTarget();
    }
  });

  it('reads where the first monthly partition begins from the catalog (the deletion probe relies on it)', async () => {
    const start = new Date((await firstMonthlyPartitionStart(worker.deps.orm.em.fork()))!);
    expect(start.getTime()).toBe(Date.UTC(start.getUTCFullYear(), start.getUTCMonth(), 1));
    expect(start.getTime()).toBeLessThanOrEqual(Date.UTC(new Date().getUTCFullYear(), new Date().getUTCMonth(), 1));
    expect((await sql(worker.deps.orm, `select to_regclass(?) as t`, [monthName(start)]))[0].t).not.toBeNull();
  });

  it('purges ingestion warnings older than 30 days (of every project) and keeps the younger ones', async () => {
    const other = await createAccount(worker.deps.orm);
    const inserted = await sql(
      worker.deps.orm,
      `insert into ingestion_warning (project_id, type, details, timestamp) values
         (?, 'event_dropped_too_deep', '{}', now() - interval '31 days'),
         (?, 'event_dropped_too_deep', '{}', now() - interval '31 days'),
         (?, 'event_dropped_too_deep', '{}', now() - interval '29 days')
       returning id`,
      [account.projectId, other.projectId, account.projectId],
    );
    const job = await runJob({});
    expect(job.returnvalue).toMatchObject({ ingestionWarningsPurged: expect.any(Number) });
    const left = await sql(worker.deps.orm, `select id from ingestion_warning where id = any(?::bigint[])`, [
      pgArray(inserted.map((r) => r.id)),
    ]);
    // Another file's purge may have removed the old ones first; either way they are gone.
    expect(left.map((r) => r.id)).toEqual([inserted[2].id]);
  });

  it('purges finished webhook deliveries older than 30 days, never a pending one', async () => {
    const [webhook] = await sql(
      worker.deps.orm,
      `insert into webhook (project_id, url, secret, event_types) values (?, 'https://example.com/', 'whsec_0123456789abcdef', '{deletion.failed}') returning id`,
      [account.projectId],
    );
    const inserted = await sql(
      worker.deps.orm,
      // The pending one's retry is a day away: no worker's reconciler sends it meanwhile.
      `insert into webhook_delivery (webhook_id, event_type, payload, status, created_at, next_attempt_at) values
         (?, 'deletion.failed', '{}', 'delivered', now() - interval '31 days', null),
         (?, 'deletion.failed', '{}', 'failed', now() - interval '31 days', null),
         (?, 'deletion.failed', '{}', 'pending', now() - interval '31 days', now() + interval '1 day'),
         (?, 'deletion.failed', '{}', 'delivered', now() - interval '29 days', null)
       returning id::text`,
      [webhook.id, webhook.id, webhook.id, webhook.id],
    );
    const job = await runJob({});
    expect(job.returnvalue).toMatchObject({ webhookDeliveriesPurged: expect.any(Number) });
    const left = await sql(worker.deps.orm, `select id::text from webhook_delivery where webhook_id = ? order by id`, [
      webhook.id,
    ]);
    expect(left.map((r) => r.id)).toEqual([inserted[2].id, inserted[3].id]);
  });

  it('fails at once, without retries, on a malformed months count', async () => {
    const job = await runJob({ monthsAhead: 'many' });
    expect(job.failedReason).toBe('invalid monthsAhead "many"');
  });
});
