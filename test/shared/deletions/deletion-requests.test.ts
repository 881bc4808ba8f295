// Deletion requests always take effect: a repeated request covers what was captured since the
// earlier one, a failed request is retried (automatically with a growing delay, or by an operator)
// and never blocks a new one. Real API, real in-process BullMQ worker, real PostgreSQL and Redis.
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { EntityManager } from '@mikro-orm/postgresql';
import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { reconcileDeletions } from '../../../shared/deletions/window-job.ts';
import { failEventDeletesOf, sql } from '../../db.ts';
import { capture } from '../../fixtures.ts';
import {
  call,
  createAccount,
  createKey,
  eventually,
  manageJson,
  settledJob,
  uniqueRedisPrefix,
  apiAndWorker,
} from '../../helpers.ts';
import type { Config } from '../../../shared/platform/config.ts';
import { createQueues, deletionJobId, requeueDeletions } from '../../../shared/platform/queues.ts';
import { dueDeletionIds } from '../../../shared/deletions/store.ts';
import { freePort } from '../../services.ts';

const root = fileURLToPath(new URL('../../..', import.meta.url));

// Two quick attempts per job, so a request fails finally within a second; the first automatic
// retry of a failed request waits 60 s, doubling up to an hour.
const settings = (config: Config) => {
  config.jobs.attempts = 2;
  config.jobs.backoffMs = 50;
  config.deletion.retryFirstDelaySeconds = 60;
  config.deletion.retryMaxDelaySeconds = 3600;
};
const {
  prefix,
  api,
  worker,
  accounts: [account],
} = await apiAndWorker({ configure: settings });

const P = () => `/api/projects/${account.projectId}/persons`;
const personByDistinctId = async (id: string) =>
  (await call(api.baseUrl, 'GET', `${P()}/?distinct_id=${id}`, { key: account.apiKey })).body.results[0];
const countEvents = async (distinctId: string) =>
  (
    await sql(api.orm, `select count(*)::int as n from event where project_id = ? and distinct_id = ?`, [
      account.projectId,
      distinctId,
    ])
  )[0].n;
const requestsOf = (uuid: string) =>
  sql(api.orm, `select * from async_deletion where project_id = ? and key = ? order by id`, [account.projectId, uuid]);
const row = async (id: string) => (await sql(api.orm, `select * from async_deletion where id = ?`, [id]))[0];
const events = (distinctId: string, n: number) =>
  Array.from({ length: n }, (_, i) => ({ event: 'e', distinct_id: distinctId, properties: { i } }));
const release = (mode: 'weekly' | 'off_peak') => worker.deps.queues.deletions.add('release-batch', { mode });
/** Waits until every request of the person is completed. */
const allCompleted = (uuid: string) =>
  eventually(async () => {
    const rows = await requestsOf(uuid);
    return rows.length > 0 && rows.every((r) => r.status === 'completed') ? rows : null;
  });

/** A fault in PostgreSQL: deleting this distinct id's events raises, until the returned function removes it. */
const failDeletesOf = (distinctId: string) => failEventDeletesOf(api.orm, distinctId);

describe('a repeated request covers what was captured since the earlier one', () => {
  it('DELETE ?delete_events=true twice (the person came back through new events): every event goes', async () => {
    await capture(api.baseUrl, account.projectToken, events('returner', 3));
    const first = await personByDistinctId('returner');
    expect(
      (await call(api.baseUrl, 'DELETE', `${P()}/${first.uuid}/?delete_events=true`, { key: account.apiKey })).status,
    ).toBe(204);
    await capture(api.baseUrl, account.projectToken, events('returner', 7)); // the person comes back
    const again = await personByDistinctId('returner');
    expect(again.uuid).toBe(first.uuid); // the same deterministic uuid
    expect(
      (await call(api.baseUrl, 'DELETE', `${P()}/${again.uuid}/?delete_events=true`, { key: account.apiKey })).status,
    ).toBe(204);
    expect(await countEvents('returner')).toBe(10);

    await release('weekly');
    const done = await allCompleted(first.uuid);
    expect(done.every((r) => r.delete_verified_at !== null)).toBe(true);
    expect(await countEvents('returner')).toBe(0);
  });

  it('POST delete_events twice: the second request covers the events captured in between', async () => {
    await capture(api.baseUrl, account.projectToken, events('twice', 3));
    const person = await personByDistinctId('twice');
    const a = await call(api.baseUrl, 'POST', `${P()}/${person.id}/delete_events/`, { key: account.apiKey });
    await capture(api.baseUrl, account.projectToken, events('twice', 7));
    const b = await call(api.baseUrl, 'POST', `${P()}/${person.id}/delete_events/`, { key: account.apiKey });
    expect([a.status, b.status]).toEqual([200, 200]);
    // Merged into the one pending request, whose cutoff moved to the second request.
    expect(b.body.deletion_requests[0].id).toBe(a.body.deletion_requests[0].id);
    const [merged] = await requestsOf(person.uuid);
    expect(new Date(merged.cutoff).getTime()).toBeGreaterThan(new Date(merged.created_at).getTime());

    await release('off_peak');
    await allCompleted(person.uuid);
    expect(await countEvents('twice')).toBe(0);
  });

  it('a request while an earlier one is running gets its own row, and both take effect', async () => {
    await capture(api.baseUrl, account.projectToken, events('midway', 2));
    const person = await personByDistinctId('midway');
    const a = await call(api.baseUrl, 'POST', `${P()}/${person.id}/delete_events/`, { key: account.apiKey });
    const firstId = a.body.deletion_requests[0].id;
    // As if a worker had claimed it and were deleting (a live lease): it can no longer take more.
    await sql(
      api.orm,
      `update async_deletion set status = 'running', lease_until = now() + interval '1 hour', released_at = now() where id = ?`,
      [firstId],
    );
    await capture(api.baseUrl, account.projectToken, events('midway', 4));
    const b = await call(api.baseUrl, 'POST', `${P()}/${person.id}/delete_events/`, { key: account.apiKey });
    const secondId = b.body.deletion_requests[0].id;
    expect(secondId).not.toBe(firstId);
    expect(b.body.deletion_requests[0].status).toBe('pending');

    await sql(api.orm, `update async_deletion set lease_until = now() where id = ?`, [firstId]); // the worker died
    await reconcileDeletions(null, worker.deps);
    await release('off_peak');
    await allCompleted(person.uuid);
    expect(await countEvents('midway')).toBe(0);
  });

  it('merges identical requests of one bulk_delete (a person named by id and by distinct id) into one row', async () => {
    await capture(api.baseUrl, account.projectToken, events('both-ways', 2));
    const person = await personByDistinctId('both-ways');
    const res = await call(api.baseUrl, 'POST', `${P()}/bulk_delete/`, {
      key: account.apiKey,
      body: { ids: [person.uuid, person.uuid], delete_events: true },
    });
    expect(res.status).toBe(200);
    expect(await requestsOf(person.uuid)).toHaveLength(1);
  });
});

describe('a failed request is not final', () => {
  it('is retried after a growing delay, shows its error and attempts, and never blocks a new request', async () => {
    await capture(api.baseUrl, account.projectToken, events('doomed', 6));
    const person = await personByDistinctId('doomed');
    const heal = await failDeletesOf('doomed');
    let failedId: string;
    try {
      const res = await call(api.baseUrl, 'POST', `${P()}/${person.id}/delete_events/`, { key: account.apiKey });
      failedId = res.body.deletion_requests[0].id;
      await release('off_peak');
      const failed = await eventually(async () => ((await row(failedId)).status === 'failed' ? row(failedId) : null));
      expect(failed.delete_verified_at).toBeNull();
      expect(failed.last_error).toContain('injected fault');
      expect(failed.attempts).toBe(2);
      const firstDelay = (new Date(failed.next_attempt_at).getTime() - Date.now()) / 1000;
      expect(firstDelay).toBeGreaterThan(50);
      expect(firstDelay).toBeLessThan(70);

      // The API shows why and when it is tried again.
      const status = await call(
        api.baseUrl,
        'GET',
        `${P()}/deletion_status/?status=failed&person_uuid=${person.uuid}`,
        { key: account.apiKey },
      );
      expect(status.body.results[0]).toMatchObject({ id: failedId, status: 'failed', attempts: 2, failures: 1 });
      expect(status.body.results[0].last_error).toContain('injected fault');
      expect(new Date(status.body.results[0].next_attempt_at).getTime()).toBe(
        new Date(failed.next_attempt_at).getTime(),
      );

      // Not due yet: the reconciler leaves it alone (its finished job stays as it is).
      const job = (await worker.deps.queues.deletions.getJob(deletionJobId(failedId)))!;
      await reconcileDeletions(null, worker.deps);
      expect(await job.getState()).toBe('failed');
      expect((await row(failedId)).failures).toBe(1);
      // Due (its time has come): tried again, fails again, and the next delay doubles.
      await sql(api.orm, `update async_deletion set next_attempt_at = now() where id = ?`, [failedId]);
      await reconcileDeletions(null, worker.deps);
      const second = await eventually(async () => {
        const r = await row(failedId);
        return r.status === 'failed' && r.failures === 2 ? r : null;
      });
      expect(second.attempts).toBe(4);
      const secondDelay = (new Date(second.next_attempt_at).getTime() - Date.now()) / 1000;
      expect(secondDelay).toBeGreaterThan(100);
      expect(secondDelay).toBeLessThan(125);

      // A new request for the person is a request of its own, not the failed one.
      await capture(api.baseUrl, account.projectToken, events('doomed', 1));
      const fresh = await call(api.baseUrl, 'POST', `${P()}/${person.id}/delete_events/`, { key: account.apiKey });
      expect(fresh.status).toBe(200);
      expect(fresh.body.deletion_requests[0].id).not.toBe(failedId);
      expect(fresh.body.deletion_requests[0].status).toBe('pending');
    } finally {
      await heal();
    }
    // The fault is gone: the next automatic retry deletes everything.
    await sql(api.orm, `update async_deletion set next_attempt_at = now() where id = ?`, [failedId!]);
    await reconcileDeletions(null, worker.deps);
    await eventually(async () => (await row(failedId!)).status === 'completed');
    await release('off_peak');
    await allCompleted(person.uuid);
    expect(await countEvents('doomed')).toBe(0);
  });

  it('an operator retries a failed request through the API at once', async () => {
    await capture(api.baseUrl, account.projectToken, events('operator', 4));
    const person = await personByDistinctId('operator');
    const heal = await failDeletesOf('operator');
    const res = await call(api.baseUrl, 'POST', `${P()}/${person.id}/delete_events/`, { key: account.apiKey });
    const id = res.body.deletion_requests[0].id;
    try {
      await release('off_peak');
      await eventually(async () => (await row(id)).status === 'failed');
    } finally {
      await heal();
    }
    const pendingOne = await call(api.baseUrl, 'POST', `${P()}/deletion_status/${id}/retry/`, { key: account.apiKey });
    expect(pendingOne.status).toBe(200);
    expect(pendingOne.body).toMatchObject({ id, status: 'failed' });
    await eventually(async () => (await row(id)).status === 'completed');
    expect(await countEvents('operator')).toBe(0);

    // Only a failed request can be retried; another project's request is not found.
    const again = await call(api.baseUrl, 'POST', `${P()}/deletion_status/${id}/retry/`, { key: account.apiKey });
    expect(again.status).toBe(400);
    expect(again.body).toMatchObject({ type: 'validation_error', code: 'invalid_input' });
    const other = await createAccount(api.orm);
    const foreign = await call(
      api.baseUrl,
      'POST',
      `/api/projects/${other.projectId}/persons/deletion_status/${id}/retry/`,
      { key: other.apiKey },
    );
    expect(foreign.status).toBe(404);
    const readOnly = await call(api.baseUrl, 'POST', `${P()}/deletion_status/${id}/retry/`, {
      key: await createKey(api.orm, account.userId, { scopes: ['person:read'] }),
    });
    expect(readOnly.status).toBe(403);
  });
});

describe('from the command line (npm run manage)', () => {
  const manage = (...args: string[]) =>
    manageJson(args, { REDIS_PREFIX: prefix, JOB_ATTEMPTS: '2', JOB_BACKOFF_MS: '50' });

  it('runs a window now, lists failed requests with their error, and retries one', async () => {
    await capture(api.baseUrl, account.projectToken, events('cli', 3));
    const person = await personByDistinctId('cli');
    const heal = await failDeletesOf('cli');
    const res = await call(api.baseUrl, 'POST', `${P()}/${person.id}/delete_events/`, { key: account.apiKey });
    const id = res.body.deletion_requests[0].id;
    try {
      const ran = await manage('deletion', 'run-window', '--mode', 'off_peak');
      expect(ran.code, ran.stderr).toBe(0);
      expect(ran.json).toMatchObject({ mode: 'off_peak', worker: 'queued' });
      expect(ran.json.released).toBeGreaterThanOrEqual(1);
      await eventually(async () => (await row(id)).status === 'failed');
    } finally {
      await heal();
    }
    const listed = await manage('deletion', 'list', '--project', String(account.projectId), '--status', 'failed');
    expect(listed.code, listed.stderr).toBe(0);
    expect(listed.json).toEqual([
      expect.objectContaining({
        id,
        status: 'failed',
        failures: 1,
        last_error: expect.stringContaining('injected fault'),
      }),
    ]);
    expect(listed.json[0].next_attempt_at).toMatch(/^\d{4}-\d\d-\d\dT/);

    const retried = await manage('deletion', 'retry', '--id', id);
    expect(retried.code, retried.stderr).toBe(0);
    expect(retried.json).toMatchObject({ id, worker: 'queued' });
    await eventually(async () => (await row(id)).status === 'completed');
    expect(await countEvents('cli')).toBe(0);

    const again = await manage('deletion', 'retry', '--id', id);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain('has not failed');
    expect((await manage('deletion', 'list', '--status', 'sideways')).code).toBe(1);
  }, 120_000); // five runs of the command, each a process start
});

describe('the schedules survive Redis losing its data', () => {
  it('a real worker re-creates its schedulers after an empty Redis comes back, and releases overdue requests without them', async () => {
    const port = await freePort();
    const startRedis = () =>
      spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], {
        stdio: 'ignore',
      });
    let redis = startRedis();
    const ownPrefix = uniqueRedisPrefix();
    const child = spawn(process.execPath, ['worker/main.ts'], {
      cwd: root,
      env: {
        ...process.env,
        REDIS_URL: `redis://127.0.0.1:${port}`,
        REDIS_PREFIX: ownPrefix,
        LOG_LEVEL: 'silent',
        DELETION_RECONCILE_SECONDS: '1',
      },
      stdio: 'ignore',
    });
    const client = new Redis(`redis://127.0.0.1:${port}`, { maxRetriesPerRequest: null });
    client.on('error', () => undefined);
    const queues = createQueues(client, { redisPrefix: ownPrefix, jobs: { attempts: 1, backoffMs: 0 } });
    const schedulerIds = async () =>
      (await queues.deletions.getJobSchedulers().catch(() => [])).map((s) => s.key).sort();
    try {
      await eventually(async () => (await schedulerIds()).includes('deletion-weekly-batch'), 30_000);
      redis.kill('SIGKILL');
      await new Promise((r) => redis.once('exit', r));
      redis = startRedis(); // the same address, nothing in it
      await eventually(async () => (await schedulerIds()).length === 0 || null, 10_000).catch(() => undefined);
      // The worker re-creates its schedulers one after another: wait for the whole set, not the first one.
      await eventually(async () => (await schedulerIds()).length === 2, 30_000);
      expect(await schedulerIds()).toEqual(['deletion-off-peak', 'deletion-weekly-batch']);

      // A weekly request whose window passed while no schedule was there: released and done.
      await capture(api.baseUrl, account.projectToken, events('overdue', 3));
      const person = await personByDistinctId('overdue');
      expect(
        (await call(api.baseUrl, 'DELETE', `${P()}/${person.uuid}/?delete_events=true`, { key: account.apiKey }))
          .status,
      ).toBe(204);
      await sql(api.orm, `update async_deletion set created_at = created_at - interval '8 days' where key = ?`, [
        person.uuid,
      ]);
      await eventually(async () => (await requestsOf(person.uuid))[0].status === 'completed', 30_000);
      expect(await countEvents('overdue')).toBe(0);
    } finally {
      child.kill('SIGKILL');
      await Promise.allSettled(Object.values(queues).map((q) => q.close()));
      client.disconnect();
      redis.kill('SIGKILL');
    }
  }, 90_000);
});

describe('the reconciler and batches', () => {
  it('does not re-run the job of a request that stepped aside for a live batch', async () => {
    await capture(api.baseUrl, account.projectToken, [...events('lead', 2), ...events('companion', 2)]);
    const lead = await personByDistinctId('lead');
    const companion = await personByDistinctId('companion');
    const bulk = await call(api.baseUrl, 'POST', `${P()}/bulk_delete/`, {
      key: account.apiKey,
      body: { ids: [lead.uuid, companion.uuid], delete_events: true },
    });
    const [leadId, companionId] = bulk.body.deletion_requests.map((r: { id: string }) => r.id);
    // The lead's job holds both (live lease on the lead); the companion's own job ran and stepped aside.
    await sql(
      api.orm,
      `update async_deletion set status = 'running', released_at = now(), claimed_by = ?, lease_until = case when id = ? then now() + interval '1 hour' else now() - interval '1 second' end
        where id in (?, ?)`,
      [leadId, leadId, leadId, companionId],
    );
    const job = await worker.deps.queues.deletions.add(
      'delete',
      { deletionId: companionId },
      { jobId: deletionJobId(companionId) },
    );
    const stepped = await settledJob(worker.deps.queues.deletions, job);
    expect(stepped.returnvalue).toEqual({ deleted: 0, skipped: `in the batch of deletion request ${leadId}` });

    await reconcileDeletions(null, worker.deps);
    const after = (await worker.deps.queues.deletions.getJob(deletionJobId(companionId)))!;
    expect(after.finishedOn).toBe(stepped.finishedOn); // the same finished job: not removed and run again
    expect((await row(companionId)).attempts).toBe(0);

    // The lead died (its lease ran out): both are due again, and the lead's new attempt takes its batch back.
    await sql(api.orm, `update async_deletion set lease_until = now() - interval '1 second' where id = ?`, [leadId]);
    await reconcileDeletions(null, worker.deps);
    await eventually(async () => (await row(companionId)).status === 'completed');
    expect(await countEvents('companion')).toBe(0);
  });

  it('a pass whose list went stale while a job finished does not run that job again', async () => {
    await capture(api.baseUrl, account.projectToken, events('stale', 3));
    const person = await personByDistinctId('stale');
    const res = await call(api.baseUrl, 'DELETE', `${P()}/${person.uuid}/?delete_events=true`, { key: account.apiKey });
    expect(res.status).toBe(204);
    const [request] = await requestsOf(person.uuid);
    await sql(api.orm, `update async_deletion set released_at = now() where id = ?`, [request.id]);
    // A reconciler pass reads the due requests, then the request's job runs and completes meanwhile.
    const em = worker.deps.orm.em.fork() as EntityManager;
    const due = await dueDeletionIds(em);
    expect(due).toContain(String(request.id));
    const job = await settledJob(
      worker.deps.queues.deletions,
      await worker.deps.queues.deletions.add(
        'delete',
        { deletionId: String(request.id) },
        { jobId: deletionJobId(request.id) },
      ),
    );
    expect((await row(request.id)).status).toBe('completed');

    // The pass goes on with its stale list: the finished job is left as it is, not removed and run again.
    const added = await requeueDeletions(worker.deps.queues.deletions, due, (ids) => dueDeletionIds(em, ids));
    expect(added).not.toContain(String(request.id));
    const after = (await worker.deps.queues.deletions.getJob(deletionJobId(request.id)))!;
    expect(after.finishedOn).toBe(job.finishedOn);
  });
});
