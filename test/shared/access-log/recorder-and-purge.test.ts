// The API's recorder (rows of reads written together in the background, a failed write kept and retried,
// what waits written on close) and the daily upkeep's purge past ACCESS_LOG_RETENTION_DAYS.
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { createAccessRecorder, listPersonAccess } from '../../../shared/access-log/index.ts';
import { sql } from '../../db.ts';
import { eventually, settledJob, workerWithAccount } from '../../helpers.ts';

const { worker, account } = await workerWithAccount((config) => {
  config.accessLog.retentionDays = 30;
});
const orm = worker.deps.orm;
const entry = (personUuids: string[], requestId: string) => ({
  projectId: account.projectId,
  userId: account.userId,
  apiKeyId: null,
  action: 'person_retrieve',
  personUuids,
  requestId,
  clientAddress: '192.0.2.1',
});

describe('the recorder', () => {
  it('writes the rows of many reads in the background, in few statements, each read’s own row', async () => {
    const recorder = createAccessRecorder(orm);
    const person = randomUUID();
    const batch = `batch-${randomUUID()}`;
    await Promise.all(Array.from({ length: 50 }, (_, i) => recorder.record(entry([person, person], `${batch}-${i}`))));
    const list = () =>
      listPersonAccess(orm.em.fork(), { projectId: account.projectId, personUuid: person, limit: 100, offset: 0 });
    // Written within its window without anyone asking.
    await eventually(async () => (await list()).length === 50 || null);
    const rows = await list();
    expect(new Set(rows.map((r) => r.request_id)).size).toBe(50);
    expect(rows[0]).toMatchObject({ person_uuids: [person], client_address: '192.0.2.1', action: 'person_retrieve' });
    await recorder.record(entry([], 'nobody'));
    await recorder.drain();
    expect(await sql(orm, `select 1 from person_access_log where request_id = 'nobody'`)).toEqual([]);
  });

  it('keeps rows it could not write, retries until it can, and refuses reads once closed', async () => {
    // PostgreSQL unreachable for the first two statements.
    let refusals = 2;
    const flaky = {
      em: {
        fork: () => {
          if (refusals-- > 0) throw Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' });
          return orm.em.fork();
        },
      },
    } as unknown as typeof orm;
    const recorder = createAccessRecorder(flaky);
    const person = randomUUID();
    await recorder.record(entry([person], `kept-${person}`));
    await expect(recorder.drain()).rejects.toThrow(/ECONNREFUSED/);
    // Retried after its delay without anyone asking, and written.
    await eventually(
      async () =>
        (await sql(orm, `select 1 from person_access_log where request_id = ?`, [`kept-${person}`])).length === 1 ||
        null,
    );
    expect(refusals).toBeLessThan(0);
    await recorder.close(300);
    await expect(recorder.record(entry([person], 'after-close'))).rejects.toThrow(/closed/);
  });

  it('refuses reads while 50,000 rows wait for PostgreSQL (the API answers 503), and writes them all once it answers', async () => {
    let reachable = false;
    const away = {
      em: {
        fork: () => {
          if (!reachable) throw Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' });
          return orm.em.fork();
        },
      },
    } as unknown as typeof orm;
    const recorder = createAccessRecorder(away);
    const person = randomUUID();
    for (let i = 0; i < 50_000; i++) await recorder.record(entry([person], `backlog-${person}-${i}`));
    await expect(recorder.record(entry([person], `refused-${person}`))).rejects.toThrow(/50000 rows wait/);
    reachable = true;
    await recorder.drain();
    const [{ n }] = await sql(
      orm,
      `select count(*)::int as n from person_access_log where request_id like ? and ? = any(person_uuids::text[])`,
      [`backlog-${person}-%`, person],
    );
    expect(n).toBe(50_000);
    // Written, the backlog is gone: reads are recorded again; the refused one never was.
    await recorder.record(entry([person], `after-${person}`));
    await recorder.close();
    expect(await sql(orm, `select 1 from person_access_log where request_id = ?`, [`refused-${person}`])).toEqual([]);
    expect(await sql(orm, `select 1 from person_access_log where request_id = ?`, [`after-${person}`])).toHaveLength(1);
  });

  it('writes the other rows of a batch PostgreSQL refuses for one row’s data', async () => {
    const recorder = createAccessRecorder(orm);
    const person = randomUUID();
    await recorder.record(entry([person], `before-${person}`));
    await recorder.record(entry(['not-a-uuid'], `bad-${person}`));
    await recorder.record(entry([person], `after-${person}`));
    await recorder.drain();
    const written = await sql(orm, `select request_id from person_access_log where ? = any(person_uuids::text[])`, [
      person,
    ]);
    expect(written.map((r) => r.request_id).sort()).toEqual([`after-${person}`, `before-${person}`]);
  });

  it('writes on close what waits', async () => {
    const recorder = createAccessRecorder(orm);
    const person = randomUUID();
    await recorder.record(entry([person], `close-${person}`));
    await recorder.close();
    expect(await sql(orm, `select 1 from person_access_log where request_id = ?`, [`close-${person}`])).toHaveLength(1);
  });
});

describe('the purge', () => {
  it('removes rows older than ACCESS_LOG_RETENTION_DAYS in the daily upkeep, and only those', async () => {
    const person = randomUUID();
    const recorder = createAccessRecorder(orm);
    for (const id of ['old', 'kept', 'new']) await recorder.record(entry([person], `purge-${person}-${id}`));
    await recorder.drain();
    await sql(orm, `update person_access_log set timestamp = now() - interval '31 days' where request_id = ?`, [
      `purge-${person}-old`,
    ]);
    await sql(orm, `update person_access_log set timestamp = now() - interval '29 days' where request_id = ?`, [
      `purge-${person}-kept`,
    ]);
    const queue = worker.deps.queues.maintenance;
    const job = await settledJob(queue, await queue.add('ensure-event-partitions', {}));
    expect(job.failedReason).toBeUndefined();
    expect(job.returnvalue.accessLogPurged).toBeGreaterThanOrEqual(1);
    const left = await sql(
      orm,
      `select request_id from person_access_log where ? = any(person_uuids::text[]) order by id`,
      [person],
    );
    expect(left.map((r) => r.request_id)).toEqual([`purge-${person}-kept`, `purge-${person}-new`]);
  });
});
