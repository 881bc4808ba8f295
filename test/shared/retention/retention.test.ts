// The retention job, run by a real worker: each project's events and recordings past its line are
// removed and nothing newer; other projects are untouched; the preview counted exactly what the run
// removed; a monthly partition holding only rows past their projects' lines is dropped whole, and
// one that also holds a row another project keeps is not (its old rows are deleted instead).
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { loadConfig } from '../../../shared/platform/config.ts';
import { runRetention } from '../../../shared/retention/run.ts';
import { defaultSchedules } from '../../../shared/platform/schedules.ts';
import { sql } from '../../db.ts';
import { call, createAccount, settledJob, startApi, workerWithAccount, type TestAccount } from '../../helpers.ts';

const { worker, account: a } = await workerWithAccount();
const api = await startApi();
afterAll(() => api.close());
const orm = worker.deps.orm;
const DAY = 86_400_000;

// Two months long past, whose partitions this file creates (the migration makes only this month's
// and later ones): January holds only rows past the lines of A and B, February also one of C, who
// keeps everything.
const JAN = 'event_y1981m01';
const FEB = 'event_y1981m02';
const MAR = 'event_y1981m03';
const months: [string, string, string][] = [
  [JAN, '1981-01-01T00:00:00Z', '1981-02-01T00:00:00Z'],
  [FEB, '1981-02-01T00:00:00Z', '1981-03-01T00:00:00Z'],
  [MAR, '1981-03-01T00:00:00Z', '1981-04-01T00:00:00Z'],
];

async function dropTestPartitions() {
  for (const [name] of months) {
    const [{ exists }] = await sql(orm, `select to_regclass(?) is not null as exists`, [name]);
    if (exists) await sql(orm, `drop table ${name}`);
  }
}

/** A month's partition, taking over the rows the default partition holds for it (as ensure_event_partitions does). */
async function createPartition(name: string, from: string, to: string) {
  await sql(
    orm,
    `begin;
     create table ${name} (like event including defaults);
     insert into ${name} select * from event_default where timestamp >= '${from}' and timestamp < '${to}';
     delete from event_default where timestamp >= '${from}' and timestamp < '${to}';
     alter table event attach partition ${name} for values from ('${from}') to ('${to}');
     commit`,
  );
}

const isPartition = async (name: string) =>
  (
    await sql(
      orm,
      `select count(*)::int as n from pg_inherits i join pg_class c on c.oid = i.inhrelid
        where i.inhparent = 'event'::regclass and c.relname = ?`,
      [name],
    )
  )[0].n === 1;

async function insertEvents(projectId: number, timestamps: (string | Date)[]): Promise<string[]> {
  const uuids = timestamps.map(() => randomUUID());
  for (const [i, ts] of timestamps.entries())
    await sql(
      orm,
      `insert into event (uuid, project_id, event, distinct_id, timestamp) values (?, ?, 'pageview', 'd', ?)`,
      [uuids[i], projectId, ts instanceof Date ? ts.toISOString() : ts],
    );
  return uuids;
}

async function insertRecording(projectId: number, endedDaysAgo: number, snapshots: number): Promise<string> {
  const session = randomUUID();
  const end = new Date(Date.now() - endedDaysAgo * DAY);
  const start = new Date(end.getTime() - 600_000);
  await sql(
    orm,
    `insert into session_recording (project_id, session_id, distinct_id, start_time, end_time, snapshot_count)
     values (?, ?, 'd', ?, ?, ?)`,
    [projectId, session, start.toISOString(), end.toISOString(), snapshots],
  );
  for (let i = 0; i < snapshots; i++)
    await sql(
      orm,
      `insert into session_recording_snapshot (project_id, session_id, timestamp, data) values (?, ?, ?, '{}')`,
      [projectId, session, new Date(start.getTime() + i * 1000).toISOString()],
    );
  return session;
}

const eventsLeft = async (uuids: string[]) =>
  (await sql(orm, `select uuid from event where uuid = any(?::uuid[]) order by uuid`, [`{${uuids.join(',')}}`])).map(
    (r) => r.uuid,
  );
const recordingsLeft = async (projectId: number) =>
  (
    await sql(orm, `select session_id from session_recording where project_id = ? order by session_id`, [projectId])
  ).map((r) => r.session_id);
const snapshotsLeft = async (projectId: number) =>
  (await sql(orm, `select count(*)::int as n from session_recording_snapshot where project_id = ?`, [projectId]))[0].n;

const patch = (account: TestAccount, body: unknown) =>
  call(api.baseUrl, 'PATCH', `/api/projects/${account.projectId}/`, { key: account.apiKey, body });
const preview = async (account: TestAccount) =>
  (await call(api.baseUrl, 'GET', `/api/projects/${account.projectId}/retention/preview/`, { key: account.apiKey }))
    .body;
const runs = async (account: TestAccount) =>
  (await call(api.baseUrl, 'GET', `/api/projects/${account.projectId}/retention/runs/`, { key: account.apiKey })).body;

let b: TestAccount;
let c: TestAccount;
const data = {} as Record<string, string[]>;
const sessions = {} as Record<string, string>;

beforeAll(async () => {
  b = await createAccount(orm);
  c = await createAccount(orm);
  await dropTestPartitions();
  for (const m of months) await createPartition(...m);
  const now = Date.now();
  // A: 30 days of events and of recordings.
  data.aJan = await insertEvents(a.projectId, ['1981-01-05T00:00:00Z', '1981-01-20T00:00:00Z', '1981-01-31T23:59:59Z']);
  data.aFeb = await insertEvents(a.projectId, ['1981-02-02T00:00:00Z', '1981-02-27T00:00:00Z']);
  data.aDefault = await insertEvents(a.projectId, ['1975-06-01T00:00:00Z']); // before every month: the default partition
  data.aOld = await insertEvents(a.projectId, [new Date(now - 45 * DAY)]);
  data.aNew = await insertEvents(a.projectId, [new Date(now - 5 * DAY), new Date(now - 3600_000)]);
  sessions.aOld = await insertRecording(a.projectId, 60, 3);
  sessions.aNew = await insertRecording(a.projectId, 1, 2);
  // B: 30 days of events, recordings kept forever.
  data.bJan = await insertEvents(b.projectId, ['1981-01-10T00:00:00Z', '1981-01-11T00:00:00Z']);
  data.bNew = await insertEvents(b.projectId, [new Date(now - 2 * DAY)]);
  sessions.bOld = await insertRecording(b.projectId, 400, 2);
  // C: no retention; a row in February keeps that month's partition.
  data.cFeb = await insertEvents(c.projectId, ['1981-02-14T00:00:00Z']);
  data.cOld = await insertEvents(c.projectId, ['1975-06-01T00:00:00Z', new Date(now - 400 * DAY)]);
  sessions.cOld = await insertRecording(c.projectId, 400, 1);

  expect((await patch(a, { event_retention_days: 30, recording_retention_days: 30 })).status).toBe(200);
  expect((await patch(b, { event_retention_days: 30 })).status).toBe(200);
});
afterAll(async () => {
  await patch(a, { event_retention_days: null, recording_retention_days: null });
  await patch(b, { event_retention_days: null });
  await dropTestPartitions();
});

describe('retention run', () => {
  it('runs in the off-peak window by default', () => {
    expect(defaultSchedules(loadConfig()).find((s) => s.schedulerId === 'retention-off-peak')).toMatchObject({
      job: 'retention',
      pattern: '0 3 * * *',
    });
  });

  it('removes what the preview said and nothing else, dropping the month held only by rows past their lines', async () => {
    const before = { a: await preview(a), b: await preview(b), c: await preview(c) };
    expect(before.a).toMatchObject({
      events: 7,
      events_in_dropped_partitions: 3,
      partitions_dropped: [JAN],
      recordings: 1,
      snapshots: 3,
    });
    expect(before.b).toMatchObject({
      events: 2,
      events_in_dropped_partitions: 2,
      partitions_dropped: [JAN],
      recording_cutoff: null,
      recordings: 0,
    });
    expect(before.c).toMatchObject({ event_cutoff: null, events: 0, recordings: 0, partitions_dropped: [] });
    expect(await isPartition(JAN)).toBe(true);

    const job = await settledJob(
      worker.deps.queues.maintenance,
      await worker.deps.queues.maintenance.add('retention', {}),
    );
    expect(job.failedReason).toBeUndefined();
    expect(job.returnvalue.partitionsDropped).toContain(JAN);
    expect(job.returnvalue.partitionsDropped).not.toContain(FEB);

    // The month of A's and B's old rows only is gone from the catalog; February, which holds C's row, stays.
    expect(await isPartition(JAN)).toBe(false);
    expect((await sql(orm, `select to_regclass(?) as t`, [JAN]))[0].t).toBeNull();
    expect(await isPartition(FEB)).toBe(true);

    // Older than the line: gone. Newer: untouched. C (no retention): untouched.
    expect(await eventsLeft([...data.aJan, ...data.aFeb, ...data.aDefault, ...data.aOld, ...data.bJan])).toEqual([]);
    expect(await eventsLeft([...data.aNew, ...data.bNew])).toEqual([...data.aNew, ...data.bNew].sort());
    expect(await eventsLeft([...data.cFeb, ...data.cOld])).toEqual([...data.cFeb, ...data.cOld].sort());
    expect(await recordingsLeft(a.projectId)).toEqual([sessions.aNew]);
    expect(await snapshotsLeft(a.projectId)).toBe(2);
    expect(await recordingsLeft(b.projectId)).toEqual([sessions.bOld]);
    expect(await recordingsLeft(c.projectId)).toEqual([sessions.cOld]);
    expect(await snapshotsLeft(c.projectId)).toBe(1);

    // Each project with retention has a record of the run, with the preview's counts.
    const fields = ['events', 'events_in_dropped_partitions', 'partitions_dropped', 'recordings', 'snapshots'];
    const pick = (o: Record<string, unknown>) => Object.fromEntries(fields.map((f) => [f, o[f]]));
    const [runA] = (await runs(a)).results;
    const [runB] = (await runs(b)).results;
    expect(pick(runA)).toEqual(pick(before.a));
    expect(pick(runB)).toEqual(pick(before.b));
    expect(runA).toMatchObject({ job_id: job.id, event_cutoff: expect.any(String) });
    expect(new Date(runA.finished_at).getTime()).toBeGreaterThanOrEqual(new Date(runA.started_at).getTime());
    // The run's line: 00:00 UTC of its day, minus 30 days.
    const today = new Date();
    const line = Date.UTC(today.getUTCFullYear(), today.getUTCMonth(), today.getUTCDate()) - 30 * DAY;
    expect(new Date(runA.event_cutoff).getTime()).toBe(line);
    expect(new Date(runA.recording_cutoff).getTime()).toBe(line);
    expect((await runs(c)).count).toBe(0);

    // Nothing is left to remove: the preview says so, and the next run removes nothing.
    expect(await preview(a)).toMatchObject({ events: 0, recordings: 0, snapshots: 0, partitions_dropped: [] });
    await settledJob(worker.deps.queues.maintenance, await worker.deps.queues.maintenance.add('retention', {}));
    const again = (await runs(a)).results;
    expect(again).toHaveLength(2);
    expect(pick(again[0])).toEqual({
      ...pick(before.a),
      events: 0,
      events_in_dropped_partitions: 0,
      partitions_dropped: [],
      recordings: 0,
      snapshots: 0,
    });
  });

  it('deletes a droppable month’s rows instead when the event table cannot be locked in time, and keeps the month', async () => {
    const d = await createAccount(orm);
    const rows = await insertEvents(d.projectId, ['1981-03-02T00:00:00Z', '1981-03-30T00:00:00Z']);
    expect((await patch(d, { event_retention_days: 10 })).status).toBe(200);
    // A long read of the event table (a report, an export) holds a lock the detach must wait for.
    const reader = new pg.Client({ connectionString: loadConfig().databaseDirectUrl });
    await reader.connect();
    const skipped: string[] = [];
    try {
      await reader.query(`begin; lock table event in access share mode`);
      const result = await runRetention(orm.em.fork(), new Date(), {
        chunk: 1,
        lockTimeoutMs: 100,
        lockAttempts: 2,
        onDropSkipped: (partition, why) => skipped.push(`${partition} ${why}`),
      });
      expect(skipped).toContain(`${MAR} busy`);
      expect(result.partitionsDropped).not.toContain(MAR);
      expect(result.projects.find((p) => p.projectId === d.projectId)).toMatchObject({
        events: 2,
        eventsInDroppedPartitions: 0,
        partitionsDropped: [],
      });
    } finally {
      await reader.query('rollback');
      await reader.end();
      await patch(d, { event_retention_days: null });
    }
    expect(await isPartition(MAR)).toBe(true);
    expect(await eventsLeft(rows)).toEqual([]);
  });
});
