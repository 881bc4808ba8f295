// Deletion requests processed by a real BullMQ worker on the real Redis and PostgreSQL.
import { spawn, type ChildProcess } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { deletePersonData } from '../../../shared/deletions/job.ts';
import { syncSchedulers } from '../../../worker/runtime.ts';
import { defaultSchedules } from '../../../shared/platform/schedules.ts';
import { loadConfig } from '../../../shared/platform/config.ts';
import { sql } from '../../db.ts';
import { pgArray } from '../../../shared/platform/db/sql.ts';
import { deletionJobId } from '../../../shared/platform/queues.ts';
import { capture } from '../../fixtures.ts';
import { call, eventually, settledJob, startApi, apiAndWorker } from '../../helpers.ts';
import { freePort } from '../../services.ts';

const {
  prefix,
  api,
  worker,
  accounts: [account, other],
} = await apiAndWorker({ accounts: 2 });

const P = () => `/api/projects/${account.projectId}/persons`;
const personByDistinctId = async (id: string) =>
  (await call(api.baseUrl, 'GET', `${P()}/?distinct_id=${id}`, { key: account.apiKey })).body.results[0];
const countEvents = async (projectId: number, distinctId: string) =>
  (
    await sql(api.orm, `select count(*)::int as n from event where project_id = ? and distinct_id = ?`, [
      projectId,
      distinctId,
    ])
  )[0].n;
const row = async (id: string) => (await sql(api.orm, `select * from async_deletion where id = ?`, [id]))[0];

describe('schedulers', () => {
  it('upserts the weekly (Sunday 05:00 UTC), off-peak and reconciler schedulers once, with the right next runs', async () => {
    await syncSchedulers(worker.deps, defaultSchedules(worker.deps.config));
    await syncSchedulers(worker.deps, defaultSchedules(worker.deps.config)); // a second worker starting: still one of each
    const found = await worker.deps.queues.deletions.getJobSchedulers();
    // The reconciler is a timer in each worker, not a Redis-held schedule (it must run when Redis lost them).
    expect(found.map((s) => s.key).sort()).toEqual(['deletion-off-peak', 'deletion-weekly-batch']);
    const weekly = found.find((s) => s.key === 'deletion-weekly-batch')!;
    expect(weekly.pattern).toBe('0 5 * * 0');
    const next = new Date(weekly.next!);
    expect(next.getUTCDay()).toBe(0);
    expect(next.getUTCHours()).toBe(5);
    expect(next.getUTCMinutes()).toBe(0);
    expect(next.getTime()).toBeGreaterThan(Date.now());
    expect(next.getTime() - Date.now()).toBeLessThanOrEqual(7 * 86400_000);
    const offPeak = new Date(found.find((s) => s.key === 'deletion-off-peak')!.next!);
    expect(offPeak.getUTCHours()).toBe(3);
    expect(offPeak.getTime() - Date.now()).toBeLessThanOrEqual(86400_000);
    process.env.DELETION_WEEKLY_CRON = '0 6 * * 6';
    try {
      expect(defaultSchedules(loadConfig())[0].pattern).toBe('0 6 * * 6');
      process.env.DELETION_WEEKLY_CRON = '0 6 * * 9';
      expect(() => loadConfig()).toThrow('DELETION_WEEKLY_CRON must be a cron pattern, got "0 6 * * 9"');
    } finally {
      delete process.env.DELETION_WEEKLY_CRON;
    }
    // No surprise runs during the other tests.
    for (const queue of Object.values(worker.deps.queues))
      for (const s of await queue.getJobSchedulers()) await queue.removeJobScheduler(s.key!);
  });
});

describe('event deletion', () => {
  it('deletes exactly the person’s pre-request events when the weekly batch runs, then is a no-op', async () => {
    await capture(api.baseUrl, account.projectToken, [
      ...Array.from({ length: 30 }, (_, i) => ({ event: 'e', distinct_id: 'victim', properties: { i } })),
      { event: '$identify', distinct_id: 'victim', properties: { $anon_distinct_id: 'victim-device' } },
      { event: 'e', distinct_id: 'bystander' },
    ]);
    await capture(api.baseUrl, other.projectToken, [{ event: 'e', distinct_id: 'victim' }]);
    const victim = await personByDistinctId('victim');
    const res = await call(api.baseUrl, 'DELETE', `${P()}/${victim.uuid}/?delete_events=true`, { key: account.apiKey });
    expect(res.status).toBe(204);
    const [request] = await sql(api.orm, `select id::text as id from async_deletion where project_id = ? and key = ?`, [
      account.projectId,
      victim.uuid,
    ]);
    // An event after the request (the same distinct id, re-used): not part of the deletion.
    await capture(api.baseUrl, account.projectToken, [{ event: 'after', distinct_id: 'victim' }]);

    // Weekly: waits for its batch. The API queued no job for it (it answered after enqueueing what runs at once).
    expect((await row(request.id)).status).toBe('pending');
    expect(await worker.deps.queues.deletions.getJob(deletionJobId(request.id))).toBeUndefined();

    await worker.deps.queues.deletions.add('release-batch', { mode: 'weekly' });
    const done = await eventually(async () =>
      (await row(request.id)).status === 'completed' ? row(request.id) : null,
    );
    expect(done.delete_verified_at).not.toBeNull();
    expect(Number(done.rows_deleted)).toBe(31);
    expect(await countEvents(account.projectId, 'victim')).toBe(1); // only the event sent after the request
    expect(await countEvents(account.projectId, 'bystander')).toBe(1);
    expect(await countEvents(other.projectId, 'victim')).toBe(1);

    const status = await call(
      api.baseUrl,
      'GET',
      `${P()}/deletion_status/?status=completed&person_uuid=${victim.uuid}`,
      { key: account.apiKey },
    );
    expect(status.body.results[0]).toMatchObject({ status: 'completed', person_uuid: victim.uuid });

    const again = await deletePersonData(
      { data: { deletionId: request.id }, updateProgress: async () => undefined } as any,
      worker.deps,
    );
    expect(again).toEqual({ deleted: 0, skipped: 'already completed' });
  });

  it('deletes a batch of persons’ events in one pass: each request’s own events, counts and cutoff, and no other project’s', async () => {
    const ids = Array.from({ length: 5 }, (_, i) => `batch-${i}`);
    await capture(
      api.baseUrl,
      account.projectToken,
      ids.flatMap((id, i) => Array.from({ length: i + 1 }, () => ({ event: 'e', distinct_id: id }))),
    );
    await capture(api.baseUrl, other.projectToken, [
      { event: 'e', distinct_id: 'batch-0' },
      { event: 'e', distinct_id: 'batch-0' },
    ]);
    const bulk = await call(api.baseUrl, 'POST', `${P()}/bulk_delete/`, {
      key: account.apiKey,
      body: { distinct_ids: ids, delete_events: true },
    });
    expect(bulk.status).toBe(200);
    const foreign = (
      await call(api.baseUrl, 'GET', `/api/projects/${other.projectId}/persons/?distinct_id=batch-0`, {
        key: other.apiKey,
      })
    ).body.results[0];
    expect(
      (
        await call(
          api.baseUrl,
          'DELETE',
          `/api/projects/${other.projectId}/persons/${foreign.uuid}/?delete_events=true`,
          { key: other.apiKey },
        )
      ).status,
    ).toBe(204);
    await capture(api.baseUrl, account.projectToken, [{ event: 'after', distinct_id: 'batch-0' }]); // after the request: kept

    const requests = await sql(
      api.orm,
      `select id::text as id, distinct_ids[1] as distinct_id from async_deletion where project_id = ? and mode = 'weekly' and status = 'pending' order by id`,
      [account.projectId],
    );
    expect(requests).toHaveLength(5);
    const [foreignRequest] = await sql(
      api.orm,
      `select id::text as id from async_deletion where project_id = ? and key = ?`,
      [other.projectId, foreign.uuid],
    );
    // Released as the weekly run does, then the first request's job run here, ahead of the queue's
    // jobs (which a worker would run concurrently, each taking whatever was still unclaimed).
    await sql(api.orm, `update async_deletion set released_at = now() where project_id = ? and mode = 'weekly'`, [
      account.projectId,
    ]);
    const led = await deletePersonData(
      { id: 'direct', data: { deletionId: requests[0].id }, updateProgress: async () => undefined } as any,
      worker.deps,
    );
    expect(led).toEqual({ deleted: 1 + 2 + 3 + 4 + 5, requests: 5 });
    await worker.deps.queues.deletions.add('release-batch', { mode: 'weekly' });
    const done = await Promise.all(
      requests.map((r) => eventually(async () => ((await row(r.id)).status === 'completed' ? row(r.id) : null))),
    );
    await eventually(async () => (await row(foreignRequest.id)).status === 'completed');

    // The first request led a batch of all five; the batch's count is on its row (batch-i had i + 1 events).
    const lead = requests[0].id;
    expect(done.map((d) => String(d.claimed_by))).toEqual(done.map(() => lead));
    expect(done.map((d) => Number(d.rows_deleted))).toEqual([15, 0, 0, 0, 0]);
    expect(done.map((d) => d.attempts)).toEqual([1, 1, 1, 1, 1]);
    // Their own jobs, run afterwards, find them done and delete nothing.
    for (const r of requests.slice(1)) {
      expect(
        await deletePersonData(
          { id: 'direct', data: { deletionId: r.id }, updateProgress: async () => undefined } as any,
          worker.deps,
        ),
      ).toEqual({ deleted: 0, skipped: 'already completed' });
    }
    for (const [i, id] of ids.entries()) expect(await countEvents(account.projectId, id)).toBe(i === 0 ? 1 : 0);
    // The other project's request was its own batch.
    expect(String((await row(foreignRequest.id)).claimed_by)).toBe(foreignRequest.id);
    expect(Number((await row(foreignRequest.id)).rows_deleted)).toBe(2);
  });

  it('deletes events in the default partition (older than the first month) and in the monthly ones in one run', async () => {
    await capture(api.baseUrl, account.projectToken, [
      { event: 'e', distinct_id: 'old-and-new' },
      { event: 'e', distinct_id: 'old-and-new' },
      { event: 'e', distinct_id: 'only-new' },
    ]);
    const oldAndNew = await personByDistinctId('old-and-new');
    const onlyNew = await personByDistinctId('only-new');
    await sql(
      api.orm,
      `insert into event (uuid, project_id, event, distinct_id, person_id, properties, timestamp, created_at) values (gen_random_uuid(), ?, 'imported', 'old-and-new', ?::uuid, '{}', '1999-06-01', '1999-06-01')`,
      [account.projectId, oldAndNew.uuid],
    );
    const bulk = await call(api.baseUrl, 'POST', `${P()}/bulk_delete/`, {
      key: account.apiKey,
      body: { ids: [oldAndNew.uuid, onlyNew.uuid], delete_events: true },
    });
    expect(bulk.status).toBe(200);
    const requests = await sql(
      api.orm,
      `select id::text as id from async_deletion where project_id = ? and key = any(?::text[]) order by id`,
      [account.projectId, pgArray([oldAndNew.uuid, onlyNew.uuid])],
    );
    await sql(api.orm, `update async_deletion set released_at = now() where id = any(?::bigint[])`, [
      pgArray(requests.map((r) => r.id)),
    ]);
    const result = await deletePersonData(
      { id: 'direct', data: { deletionId: requests[0].id }, updateProgress: async () => undefined } as any,
      worker.deps,
    );
    expect(result).toEqual({ deleted: 4, requests: 2 });
    expect(await countEvents(account.projectId, 'old-and-new')).toBe(0);
    expect(await countEvents(account.projectId, 'only-new')).toBe(0);
  });

  it('completes only when nothing survives: an event committed behind the deletes is found, and the retry deletes it', async () => {
    await capture(
      api.baseUrl,
      account.projectToken,
      Array.from({ length: 3 }, () => ({ event: 'e', distinct_id: 'late-victim' })),
    );
    const victim = await personByDistinctId('late-victim');
    const res = await call(api.baseUrl, 'POST', `${P()}/${victim.uuid}/delete_events/`, { key: account.apiKey });
    expect(res.status).toBe(200);
    const requestId = String(res.body.deletion_requests[0].id);
    // A transaction that began before the request (its event is older than the cutoff) commits
    // while the job runs, after the window that would have held its event.
    const late = api.orm.em.fork();
    await late.begin();
    await late
      .getConnection()
      .execute(
        `insert into event (uuid, project_id, event, distinct_id, person_id, properties, timestamp, created_at) values (gen_random_uuid(), ?, 'late', 'late-victim', ?::uuid, '{}', '2001-01-01', '2001-01-01')`,
        [account.projectId, victim.uuid],
        'run',
        late.getTransactionContext(),
      );
    const commitLate = async () => {
      if (late.isInTransaction()) await late.commit();
    };
    const job = (deletionId: string) => ({ id: 'direct', data: { deletionId }, updateProgress: commitLate }) as any;
    await expect(deletePersonData(job(requestId), worker.deps)).rejects.toThrow(
      `deletion request ${requestId}: 1 event(s) survived; retrying`,
    );
    expect((await row(requestId)).delete_verified_at).toBeNull();
    expect(await countEvents(account.projectId, 'late-victim')).toBe(1);

    expect(await deletePersonData(job(requestId), worker.deps)).toMatchObject({ deleted: 1 });
    expect((await row(requestId)).status).toBe('completed');
    expect(await countEvents(account.projectId, 'late-victim')).toBe(0);
  });

  it('runs off-peak requests only in the off-peak batch', async () => {
    await capture(api.baseUrl, account.projectToken, [{ event: 'e', distinct_id: 'night' }]);
    const person = await personByDistinctId('night');
    const res = await call(api.baseUrl, 'POST', `${P()}/${person.id}/delete_events/`, { key: account.apiKey });
    const id = res.body.deletion_requests[0].id;
    // The weekly batch, run to its end, leaves the off-peak request alone.
    const weekly = await worker.deps.queues.deletions.add('release-batch', { mode: 'weekly' });
    expect((await settledJob(worker.deps.queues.deletions, weekly)).finishedOn).toBeTruthy();
    expect((await row(id)).status).toBe('pending');
    expect((await row(id)).released_at).toBeNull();
    await worker.deps.queues.deletions.add('release-batch', { mode: 'off_peak' });
    await eventually(async () => (await row(id)).status === 'completed');
    expect(await countEvents(account.projectId, 'night')).toBe(0);
  });
});

describe('recording deletion', () => {
  it('deletes the person’s recordings as soon as asked, and nobody else’s', async () => {
    await capture(api.baseUrl, account.projectToken, [
      { event: '$snapshot', distinct_id: 'watched', properties: { $session_id: 's-1', $snapshot_data: { a: 1 } } },
      { event: '$snapshot', distinct_id: 'watched', properties: { $session_id: 's-1', $snapshot_data: { a: 2 } } },
      { event: '$snapshot', distinct_id: 'watched', properties: { $session_id: 's-2', $snapshot_data: { a: 3 } } },
      { event: '$snapshot', distinct_id: 'other-user', properties: { $session_id: 's-3', $snapshot_data: { a: 4 } } },
      { event: 'e', distinct_id: 'watched' },
    ]);
    const person = await personByDistinctId('watched');
    const res = await call(api.baseUrl, 'POST', `${P()}/${person.id}/delete_recordings/`, { key: account.apiKey });
    const id = res.body.deletion_requests[0].id;
    const done = await eventually(async () => ((await row(id)).status === 'completed' ? row(id) : null));
    expect(Number(done.rows_deleted)).toBe(5); // 2 sessions + 3 snapshots
    const sessions = await sql(
      api.orm,
      `select session_id from session_recording where project_id = ? order by session_id`,
      [account.projectId],
    );
    expect(sessions.map((s) => s.session_id)).toEqual(['s-3']);
    const [snapshots] = await sql(
      api.orm,
      `select count(*)::int as n from session_recording_snapshot where project_id = ?`,
      [account.projectId],
    );
    expect(snapshots.n).toBe(1);
  });
});

describe('nothing lost when Redis is down', () => {
  let ownRedis: ChildProcess;
  it('processes a request made while the API could not reach Redis', async () => {
    const port = await freePort();
    ownRedis = spawn(
      'redis-server',
      ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
      { stdio: 'ignore' },
    );
    const isolated = await startApi((config) => {
      config.redisUrl = `redis://127.0.0.1:${port}`;
      config.redisPrefix = prefix;
    });
    try {
      ownRedis.kill('SIGKILL');
      await new Promise((r) => ownRedis.once('exit', r));
      await capture(isolated.baseUrl, account.projectToken, [
        { event: '$snapshot', distinct_id: 'offline', properties: { $session_id: 's-off', $snapshot_data: {} } },
        { event: 'e', distinct_id: 'offline' },
      ]);
      const person = await personByDistinctId('offline');
      const res = await call(isolated.baseUrl, 'POST', `${P()}/${person.id}/delete_recordings/`, {
        key: account.apiKey,
      });
      expect(res.status).toBe(200); // accepted: the row is in PostgreSQL
      const id = res.body.deletion_requests[0].id;
      expect((await row(id)).status).toBe('pending');
      // The worker's reconciler (every minute in production) finds the row without a job.
      await worker.deps.queues.deletions.add('reconcile', {});
      await eventually(async () => (await row(id)).status === 'completed');
      const [left] = await sql(
        api.orm,
        `select count(*)::int as n from session_recording where project_id = ? and session_id = 's-off'`,
        [account.projectId],
      );
      expect(left.n).toBe(0);
    } finally {
      await isolated.close();
    }
  });
});
