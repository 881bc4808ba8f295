// What a privacy officer controls on a deletion request (issue #32): cancelling it while it waits,
// retrying the creating request safely with an Idempotency-Key, and a dry run that answers what would
// be deleted. Real API, real in-process BullMQ worker, real PostgreSQL and Redis.
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { sql } from '../../db.ts';
import { capture } from '../../fixtures.ts';
import { call, createKey, eventually, manageJson, settledJob, apiAndWorker } from '../../helpers.ts';
import { deletionJobId } from '../../../shared/platform/queues.ts';
import { createUser } from '../../../shared/accounts/service.ts';

const {
  prefix,
  api,
  worker,
  accounts: [account, other],
} = await apiAndWorker({ accounts: 2 });

const P = (projectId = account.projectId) => `/api/projects/${projectId}/persons`;
const personByDistinctId = async (id: string) =>
  (await call(api.baseUrl, 'GET', `${P()}/?distinct_id=${id}`, { key: account.apiKey })).body.results[0];
const countEvents = async (distinctId: string) =>
  (
    await sql(api.orm, `select count(*)::int as n from event where project_id = ? and distinct_id = ?`, [
      account.projectId,
      distinctId,
    ])
  )[0].n;
const countRecordings = async (distinctId: string) =>
  (
    await sql(api.orm, `select count(*)::int as n from session_recording where project_id = ? and distinct_id = ?`, [
      account.projectId,
      distinctId,
    ])
  )[0].n;
const row = async (id: string) => (await sql(api.orm, `select * from async_deletion where id = ?`, [id]))[0];
const requestsOf = (uuid: string) =>
  sql(api.orm, `select * from async_deletion where project_id = ? and key = ? order by id`, [account.projectId, uuid]);
const events = (distinctId: string, n: number) =>
  Array.from({ length: n }, (_, i) => ({ event: 'e', distinct_id: distinctId, properties: { i } }));
const recording = (distinctId: string, session: string) => ({
  event: '$snapshot',
  distinct_id: distinctId,
  properties: { $session_id: session, $snapshot_data: { a: 1 } },
});
const post = (path: string, options: { body?: unknown; headers?: Record<string, string>; key?: string } = {}) =>
  call(api.baseUrl, 'POST', path, { key: account.apiKey, ...options });
const del = (path: string, options: { headers?: Record<string, string>; key?: string } = {}) =>
  call(api.baseUrl, 'DELETE', path, { key: account.apiKey, ...options });
/** Runs the request's job on the worker as its window would, and returns the settled job. */
const runJob = async (id: string) => {
  const queue = worker.deps.queues.deletions;
  await queue.remove(deletionJobId(id)).catch(() => undefined);
  return settledJob(queue, await queue.add('delete', { deletionId: id }, { jobId: deletionJobId(id) }));
};

describe('cancelling a pending request', () => {
  it('POST …/cancel/ answers the cancelled row; the status shows it; its window and its job leave the data alone', async () => {
    await capture(api.baseUrl, account.projectToken, events('regretted', 4));
    const person = await personByDistinctId('regretted');
    const made = await post(`${P()}/${person.id}/delete_events/`);
    const id = made.body.deletion_requests[0].id;

    const cancelled = await post(`${P()}/deletion_status/${id}/cancel/`);
    expect(cancelled.status, cancelled.text).toBe(200);
    expect(cancelled.body).toMatchObject({ id, status: 'cancelled', person_uuid: person.uuid });
    expect(cancelled.body.cancelled_at).toMatch(/^\d{4}-\d\d-\d\dT/);

    const listed = await call(api.baseUrl, 'GET', `${P()}/deletion_status/?status=cancelled`, {
      key: account.apiKey,
    });
    expect(listed.status).toBe(200);
    expect(listed.body.results.map((r: { id: string }) => r.id)).toContain(id);
    expect(listed.body.results.every((r: { status: string }) => r.status === 'cancelled')).toBe(true);

    // Who cancelled it, in the activity log.
    const [entry] = await sql(
      api.orm,
      `select user_id, activity, detail from activity_log where project_id = ? and scope = 'DeletionRequest' and item_id = ?`,
      [account.projectId, id],
    );
    expect(entry).toMatchObject({ user_id: account.userId, activity: 'cancelled' });
    expect(entry.detail.name).toBe(person.uuid);

    // Its window opens: it is not released. A job for it (enqueued before the cancel) skips it.
    const released = await settledJob(
      worker.deps.queues.deletions,
      await worker.deps.queues.deletions.add('release-batch', { mode: 'off_peak' }),
    );
    expect(released.finishedOn).toBeTruthy();
    expect((await row(id)).released_at).toBeNull();
    const job = await runJob(id);
    expect(job.returnvalue).toEqual({ deleted: 0, skipped: 'cancelled' });
    expect(await row(id)).toMatchObject({ status: 'cancelled', attempts: 0, delete_verified_at: null });
    expect(await countEvents('regretted')).toBe(4);

    // Cancelling again answers the same row (no second log entry); a new request is a row of its own.
    const again = await post(`${P()}/deletion_status/${id}/cancel/`);
    expect(again.status).toBe(200);
    expect(again.body).toMatchObject({ id, status: 'cancelled', cancelled_at: cancelled.body.cancelled_at });
    const [{ n }] = await sql(
      api.orm,
      `select count(*)::int as n from activity_log where scope = 'DeletionRequest' and item_id = ?`,
      [id],
    );
    expect(n).toBe(1);
    const fresh = await post(`${P()}/${person.id}/delete_events/`);
    expect(fresh.body.deletion_requests[0].id).not.toBe(id);
    expect(fresh.body.deletion_requests[0].status).toBe('pending');
  });

  it('DELETE on the request cancels it too', async () => {
    await capture(api.baseUrl, account.projectToken, events('second-thoughts', 2));
    const person = await personByDistinctId('second-thoughts');
    const made = await del(`${P()}/${person.uuid}/?delete_events=true&keep_person=true`);
    expect(made.status).toBe(204);
    const [request] = await requestsOf(person.uuid);
    const res = await del(`${P()}/deletion_status/${request.id}/`);
    expect(res.status, res.text).toBe(200);
    expect(res.body).toMatchObject({ id: String(request.id), status: 'cancelled' });
  });

  it('409 once a worker has claimed or completed it; 404 for unknown, malformed and other projects’ ids; 403 read-only', async () => {
    await capture(api.baseUrl, account.projectToken, [recording('too-late', 's-late')]);
    const person = await personByDistinctId('too-late');
    const made = await post(`${P()}/${person.id}/delete_recordings/`);
    const id = made.body.deletion_requests[0].id;
    await eventually(async () => (await row(id)).status === 'completed');
    const late = await post(`${P()}/deletion_status/${id}/cancel/`);
    expect(late.status).toBe(409);
    expect(late.body).toEqual({
      type: 'invalid_request',
      code: 'conflict',
      detail: expect.stringContaining('completed'),
      attr: null,
    });
    expect((await row(id)).status).toBe('completed');

    await capture(api.baseUrl, account.projectToken, events('in-flight', 1));
    const running = await post(`${P()}/${(await personByDistinctId('in-flight')).id}/delete_events/`);
    const runningId = running.body.deletion_requests[0].id;
    // As a worker's claim leaves it (a live lease).
    await sql(
      api.orm,
      `update async_deletion set status = 'running', started_at = now(), lease_until = now() + interval '1 hour' where id = ?`,
      [runningId],
    );
    const busy = await del(`${P()}/deletion_status/${runningId}/`);
    expect(busy.status).toBe(409);
    expect(busy.body).toMatchObject({ type: 'invalid_request', code: 'conflict' });
    expect((await row(runningId)).status).toBe('running');
    await sql(api.orm, `update async_deletion set status = 'completed', delete_verified_at = now() where id = ?`, [
      runningId,
    ]);

    for (const bad of ['999999999999', 'abc', '1e3']) {
      const res = await post(`${P()}/deletion_status/${bad}/cancel/`);
      expect(res.status).toBe(404);
      expect(res.body).toMatchObject({ type: 'invalid_request', code: 'not_found' });
    }
    await capture(api.baseUrl, account.projectToken, events('not-yours', 1));
    const mine = await post(`${P()}/${(await personByDistinctId('not-yours')).id}/delete_events/`);
    const mineId = mine.body.deletion_requests[0].id;
    const foreign = await call(api.baseUrl, 'POST', `${P(other.projectId)}/deletion_status/${mineId}/cancel/`, {
      key: other.apiKey,
    });
    expect(foreign.status).toBe(404);
    const readOnly = await post(`${P()}/deletion_status/${mineId}/cancel/`, {
      key: await createKey(api.orm, account.userId, { scopes: ['person:read'] }),
    });
    expect(readOnly.status).toBe(403);
    expect((await row(mineId)).status).toBe('pending');
  });

  it('a cancel racing the real worker’s claim ends in exactly one of the two', async () => {
    const n = 24;
    const ids = Array.from({ length: n }, (_, i) => `racer-${i}`);
    await capture(
      api.baseUrl,
      account.projectToken,
      ids.map((d) => recording(d, `s-${d}`)),
    );
    // Recordings go to the worker at once: each cancel races its job's claim.
    const bulk = await post(`${P()}/bulk_delete/`, {
      body: { distinct_ids: ids, delete_recordings: true, keep_person: true },
    });
    expect(bulk.status).toBe(200);
    const requests: { id: string; person_uuid: string }[] = bulk.body.deletion_requests;
    expect(requests).toHaveLength(n);
    // One after another while the worker claims: the early ones come before their job's claim, the late ones after.
    const answers = [];
    for (const r of requests) answers.push(await post(`${P()}/deletion_status/${r.id}/cancel/`));
    const uuidToDistinct = new Map<string, string>();
    for (const d of ids) uuidToDistinct.set((await personByDistinctId(d)).uuid, d);
    // Wait until each request's job has run (a cancelled request's job too: it must skip).
    for (const r of requests) {
      await eventually(async () => {
        const job = await worker.deps.queues.deletions.getJob(deletionJobId(r.id));
        return job && ((await job.isCompleted()) || (await job.isFailed()));
      });
    }
    let cancelled = 0;
    for (const [i, r] of requests.entries()) {
      const answer = answers[i];
      const stored = await row(r.id);
      const job = (await worker.deps.queues.deletions.getJob(deletionJobId(r.id)))!;
      const recordings = await countRecordings(uuidToDistinct.get(r.person_uuid)!);
      if (answer.status === 200) {
        cancelled++;
        expect(answer.body.status).toBe('cancelled');
        expect(stored).toMatchObject({ status: 'cancelled', attempts: 0, started_at: null });
        expect(job.returnvalue).toEqual({ deleted: 0, skipped: 'cancelled' });
        expect(recordings).toBe(1);
      } else {
        expect(answer.status, answer.text).toBe(409);
        expect(stored.status).toBe('completed');
        expect(recordings).toBe(0);
      }
    }
    console.info(`cancel/claim race: ${cancelled} of ${n} cancelled, ${n - cancelled} claimed first`);
  }, 60_000);
});

describe('a cancel and a claim that meet at the row lock', () => {
  /** Runs `change` on the request's row in a transaction of its own, held open until `release` is called. */
  async function holdRow(change: string, id: string) {
    const client = new pg.Client({ connectionString: process.env.DATABASE_URL });
    await client.connect();
    await client.query('begin');
    await client.query(change, [id]);
    return async () => {
      await client.query('commit');
      await client.end();
    };
  }
  /** Waits until a statement containing `text` waits for a row lock. */
  const waitingOn = (text: string) =>
    eventually(
      async () =>
        (
          await sql(
            api.orm,
            `select count(*)::int as n from pg_stat_activity
              where datname = current_database() and wait_event_type = 'Lock' and query like ?`,
            [`%${text}%`],
          )
        )[0].n > 0,
    );
  const pendingRequest = async (distinctId: string) => {
    await capture(api.baseUrl, account.projectToken, events(distinctId, 2));
    const res = await post(`${P()}/${(await personByDistinctId(distinctId)).id}/delete_events/`);
    return res.body.deletion_requests[0].id as string;
  };

  it('a claim that waited for a committing cancel sees it at once: the job skips, no busy retry', async () => {
    const id = await pendingRequest('lock-cancel-first');
    const commit = await holdRow(
      `update async_deletion set status = 'cancelled', finished_at = now() where id = $1 and status = 'pending'`,
      id,
    );
    const queue = worker.deps.queues.deletions;
    const job = await queue.add('delete', { deletionId: id }, { jobId: deletionJobId(id) });
    await waitingOn('"claimed" as (');
    await commit();
    const settled = await settledJob(queue, job);
    expect(settled.returnvalue).toEqual({ deleted: 0, skipped: 'cancelled' });
    expect(settled.attemptsMade).toBe(1);
    expect(await row(id)).toMatchObject({ status: 'cancelled', attempts: 0 });
    expect(await countEvents('lock-cancel-first')).toBe(2);
  });

  it('a cancel that waited for a committing claim answers 409 with the status it lost to', async () => {
    const id = await pendingRequest('lock-claim-first');
    const commit = await holdRow(
      `update async_deletion set status = 'running', started_at = now(), lease_until = now() + interval '1 hour' where id = $1`,
      id,
    );
    const cancelling = post(`${P()}/deletion_status/${id}/cancel/`);
    await waitingOn('set "status" = $1, "finished_at" = now(), "lease_until"');
    await commit();
    const res = await cancelling;
    expect(res.status).toBe(409);
    expect(res.body.detail).toContain('running');
    expect((await row(id)).status).toBe('running');
    await sql(api.orm, `update async_deletion set status = 'completed', delete_verified_at = now() where id = ?`, [id]);
  });
});

describe('Idempotency-Key', () => {
  it('a retried bulk_delete answers the first answer and creates nothing new', async () => {
    await capture(api.baseUrl, account.projectToken, [...events('idem-a', 2), ...events('idem-b', 3)]);
    const body = { distinct_ids: ['idem-a', 'idem-b'], delete_events: true };
    const headers = { 'Idempotency-Key': 'bulk-1' };
    const first = await post(`${P()}/bulk_delete/`, { body, headers });
    expect(first.status).toBe(200);
    expect(first.body.persons_deleted).toBe(2);
    // The persons come back (new events) before the client retries.
    await capture(api.baseUrl, account.projectToken, [...events('idem-a', 1), ...events('idem-b', 1)]);
    const back = await personByDistinctId('idem-a');
    const retried = await post(`${P()}/bulk_delete/`, { body, headers });
    expect(retried.status).toBe(200);
    expect(retried.body).toEqual(first.body);
    expect(retried.headers.get('idempotent-replayed')).toBe('true');
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    expect(await personByDistinctId('idem-a')).toMatchObject({ uuid: back.uuid });
    expect(await requestsOf(back.uuid)).toHaveLength(1);

    // The same key with another body: 422, and nothing happens.
    const reused = await post(`${P()}/bulk_delete/`, { body: { ...body, delete_recordings: true }, headers });
    expect(reused.status).toBe(422);
    expect(reused.body).toMatchObject({ type: 'invalid_request', code: 'idempotency_key_reused' });
    expect(await personByDistinctId('idem-a')).toBeDefined();
    expect(await requestsOf(back.uuid)).toHaveLength(1);
  });

  it('DELETE person with delete_events: the retry answers 204 although the person is gone', async () => {
    await capture(api.baseUrl, account.projectToken, events('idem-delete', 2));
    const person = await personByDistinctId('idem-delete');
    const headers = { 'Idempotency-Key': `del-${person.uuid}` };
    const first = await del(`${P()}/${person.uuid}/?delete_events=true`, { headers });
    expect(first.status).toBe(204);
    const retried = await del(`${P()}/${person.uuid}/?delete_events=true`, { headers });
    expect(retried.status).toBe(204);
    expect(retried.headers.get('idempotent-replayed')).toBe('true');
    expect(await requestsOf(person.uuid)).toHaveLength(1);
    const other = await del(`${P()}/${person.uuid}/?delete_events=true&delete_recordings=true`, { headers });
    expect(other.status).toBe(422);
  });

  it('concurrent retries of delete_recordings make one request and one answer; keys are per project', async () => {
    await capture(api.baseUrl, account.projectToken, [recording('idem-rec', 's-idem')]);
    const person = await personByDistinctId('idem-rec');
    const headers = { 'Idempotency-Key': 'same-key-everywhere' };
    const answers = await Promise.all(
      Array.from({ length: 5 }, () => post(`${P()}/${person.id}/delete_recordings/`, { headers })),
    );
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200, 200, 200]);
    const ids = new Set(answers.map((a) => a.body.deletion_requests[0].id));
    expect(ids.size).toBe(1);
    expect(answers.filter((a) => a.headers.get('idempotent-replayed') === 'true')).toHaveLength(4);
    expect(await requestsOf(person.uuid)).toHaveLength(1);
    await eventually(async () => (await row([...ids][0])).status === 'completed');

    // The same key in another project is another key.
    await capture(api.baseUrl, other.projectToken, events('elsewhere', 1));
    const theirs = (
      await call(api.baseUrl, 'GET', `${P(other.projectId)}/?distinct_id=elsewhere`, { key: other.apiKey })
    ).body.results[0];
    const res = await call(api.baseUrl, 'POST', `${P(other.projectId)}/${theirs.id}/delete_events/`, {
      key: other.apiKey,
      headers,
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('idempotent-replayed')).toBeNull();
  });

  it('keys are per user: another user of the project with the same key gets its own request, attributed to itself', async () => {
    await capture(api.baseUrl, account.projectToken, [recording('idem-users', 's-idem-users')]);
    const person = await personByDistinctId('idem-users');
    const headers = { 'Idempotency-Key': 'shared-by-two-users' };
    const path = `${P()}/${person.id}/delete_recordings/`;
    const first = await post(path, { headers });
    expect(first.status).toBe(200);
    const firstId = first.body.deletion_requests[0].id;
    await eventually(async () => (await row(firstId)).status === 'completed');

    const colleague = await createUser(api.orm.em.fork(), {
      email: `idem-colleague-${account.projectId}@example.com`,
      organizationId: account.organizationId,
    });
    const theirs = await post(path, { headers, key: await createKey(api.orm, colleague.id) });
    expect(theirs.status, theirs.text).toBe(200);
    expect(theirs.headers.get('idempotent-replayed')).toBeNull();
    const theirId = theirs.body.deletion_requests[0].id;
    expect(theirId).not.toBe(firstId);
    const made = await row(theirId);
    expect(made.created_by_id).toBe(colleague.id);
    expect(made.receipt_basis.requested_by.user_id).toBe(colleague.id);
    expect((await row(firstId)).created_by_id).toBe(account.userId);

    // The first user's retry still answers the first answer.
    const retried = await post(path, { headers });
    expect(retried.headers.get('idempotent-replayed')).toBe('true');
    expect(retried.body).toEqual(first.body);
  });

  it('is documented on the four endpoints in the OpenAPI document, with its 422', async () => {
    const doc = (await call(api.baseUrl, 'GET', '/api/schema/')).body;
    const base = '/api/projects/{project_id}/persons';
    for (const [path, method] of [
      [`${base}/{id}/`, 'delete'],
      [`${base}/{id}/delete_events/`, 'post'],
      [`${base}/{id}/delete_recordings/`, 'post'],
      [`${base}/bulk_delete/`, 'post'],
    ]) {
      const op = doc.paths[path][method];
      expect(op.parameters).toContainEqual(
        expect.objectContaining({
          name: 'Idempotency-Key',
          in: 'header',
          schema: expect.objectContaining({ maxLength: 255 }),
        }),
      );
      expect(op.parameters).toContainEqual(expect.objectContaining({ name: 'dry_run', in: 'query' }));
      expect(Object.keys(op.responses)).toContain('422');
    }
    expect(doc.paths[`${base}/deletion_status/{id}/cancel/`].post.responses['409']).toBeDefined();
  });

  it('a key over 255 characters is 400 and changes nothing', async () => {
    await capture(api.baseUrl, account.projectToken, events('idem-long', 1));
    const person = await personByDistinctId('idem-long');
    const res = await post(`${P()}/${person.id}/delete_events/`, { headers: { 'Idempotency-Key': 'k'.repeat(256) } });
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ type: 'validation_error', attr: 'Idempotency-Key' });
    expect(await requestsOf(person.uuid)).toHaveLength(0);
    const blank = await post(`${P()}/${person.id}/delete_events/`, { headers: { 'Idempotency-Key': ' ' } });
    expect(blank.status).toBe(400);
    expect(blank.body).toMatchObject({ type: 'validation_error', code: 'blank', attr: 'Idempotency-Key' });
    expect(await requestsOf(person.uuid)).toHaveLength(0);
    const ok = await post(`${P()}/${person.id}/delete_events/`, { headers: { 'Idempotency-Key': 'k'.repeat(255) } });
    expect(ok.status).toBe(200);
  });

  it('expired keys are purged by the daily off-peak release job, live ones kept', async () => {
    await sql(
      api.orm,
      `insert into deletion_idempotency_key (project_id, user_id, key, fingerprint, response_status, response_body, created_at, expires_at)
       values (?, ?, 'old-key', 'x', 204, null, now() - interval '25 hours', now() - interval '1 hour'),
              (?, ?, 'live-key', 'x', 204, null, now(), now() + interval '23 hours')`,
      [account.projectId, account.userId, account.projectId, account.userId],
    );
    const job = await settledJob(
      worker.deps.queues.deletions,
      await worker.deps.queues.deletions.add('release-batch', { mode: 'off_peak' }),
    );
    expect(job.returnvalue.idempotencyKeysPurged).toBeGreaterThanOrEqual(1);
    const left = await sql(
      api.orm,
      `select key from deletion_idempotency_key where project_id = ? and key in ('old-key', 'live-key')`,
      [account.projectId],
    );
    expect(left.map((r) => r.key)).toEqual(['live-key']);
  });
});

describe('dry run', () => {
  it('bulk_delete?dry_run=true answers per-store counts and the windows, and changes nothing', async () => {
    await capture(api.baseUrl, account.projectToken, [
      ...events('dry-a', 3),
      ...events('dry-b', 2),
      recording('dry-a', 's-dry-1'),
      recording('dry-b', 's-dry-2'),
    ]);
    // dry-a2 joins dry-a's person (one person, two distinct ids).
    await capture(api.baseUrl, account.projectToken, [
      { event: '$identify', distinct_id: 'dry-a', properties: { $anon_distinct_id: 'dry-a2' } },
    ]);
    const before = await sql(api.orm, `select count(*)::int as n from activity_log where project_id = ?`, [
      account.projectId,
    ]);
    const res = await post(`${P()}/bulk_delete/?dry_run=true`, {
      body: { distinct_ids: ['dry-a', 'dry-b'], delete_events: true, delete_recordings: true },
    });
    expect(res.status, res.text).toBe(200);
    const eventsNow = (await countEvents('dry-a')) + (await countEvents('dry-b'));
    expect(res.body).toMatchObject({
      dry_run: true,
      persons_found: 2,
      would_delete: { persons: 2, distinct_ids: 3, events: eventsNow, recordings: 2 },
      windows: { events: { mode: 'weekly' }, recordings: { mode: 'immediate' } },
    });
    const next = new Date(res.body.windows.events.starts_at);
    expect(next.getUTCDay()).toBe(0);
    expect(next.getUTCHours()).toBe(5);
    expect(next.getTime()).toBeGreaterThan(Date.now());
    expect(next.getTime() - Date.now()).toBeLessThanOrEqual(7 * 86_400_000);
    // Nothing changed.
    expect(await personByDistinctId('dry-a')).toBeDefined();
    expect(await personByDistinctId('dry-b')).toBeDefined();
    expect(await requestsOf((await personByDistinctId('dry-a')).uuid)).toHaveLength(0);
    expect(await countRecordings('dry-a')).toBe(1);
    const after = await sql(api.orm, `select count(*)::int as n from activity_log where project_id = ?`, [
      account.projectId,
    ]);
    expect(after).toEqual(before);
  });

  it('on DELETE person, delete_events and delete_recordings; keep_person counts no persons', async () => {
    await capture(api.baseUrl, account.projectToken, [...events('dry-c', 2), recording('dry-c', 's-dry-c')]);
    const person = await personByDistinctId('dry-c');
    const eventsNow = await countEvents('dry-c');
    expect(eventsNow).toBeGreaterThanOrEqual(2);
    const gone = await del(`${P()}/${person.uuid}/?dry_run=true&delete_events=true`);
    expect(gone.status, gone.text).toBe(200);
    expect(gone.body).toMatchObject({
      dry_run: true,
      would_delete: { persons: 1, distinct_ids: 1, events: eventsNow, recordings: 0 },
      windows: { events: { mode: 'weekly' }, recordings: null },
    });
    const ev = await post(`${P()}/${person.id}/delete_events/?dry_run=true`);
    expect(ev.status).toBe(200);
    expect(ev.body).toMatchObject({
      would_delete: { persons: 0, distinct_ids: 0, events: eventsNow, recordings: 0 },
      windows: { events: { mode: 'off_peak' }, recordings: null },
    });
    expect(new Date(ev.body.windows.events.starts_at).getUTCHours()).toBe(3);
    const rec = await post(`${P()}/${person.id}/delete_recordings/?dry_run=true`, {
      headers: { 'Idempotency-Key': 'dry-then-real' },
    });
    expect(rec.body).toMatchObject({
      would_delete: { persons: 0, distinct_ids: 0, events: 0, recordings: 1 },
      windows: { events: null, recordings: { mode: 'immediate' } },
    });
    expect(await requestsOf(person.uuid)).toHaveLength(0);
    expect(await countRecordings('dry-c')).toBe(1);
    // A dry run keeps no idempotency answer: the real request with that key runs.
    const real = await post(`${P()}/${person.id}/delete_recordings/`, {
      headers: { 'Idempotency-Key': 'dry-then-real' },
    });
    expect(real.status).toBe(200);
    expect(real.body.deletion_requests).toHaveLength(1);
  });

  it('dry_run with a parameter it does not know, or with suppress, is 400 and changes nothing', async () => {
    await capture(api.baseUrl, account.projectToken, events('dry-d', 1));
    const person = await personByDistinctId('dry-d');
    for (const [path, attr] of [
      [`${P()}/${person.uuid}/?dry_run=true&purge_everything=true`, 'purge_everything'],
      [`${P()}/${person.uuid}/?dry_run=true&suppress=true`, 'suppress'],
      [`${P()}/${person.uuid}/?dry_run=true&delete_events=true&suppress=1`, 'suppress'],
    ]) {
      const res = await del(path);
      expect(res.status, path).toBe(400);
      expect(res.body).toMatchObject({ type: 'validation_error', attr });
    }
    const bulk = await post(`${P()}/bulk_delete/?dry_run=true&suppress=true`, { body: { ids: [person.uuid] } });
    expect(bulk.status).toBe(400);
    expect(bulk.body).toMatchObject({ type: 'validation_error', attr: 'suppress' });
    expect((await post(`${P()}/${person.id}/delete_events/?dry_run=true&suppress=true`)).status).toBe(400);
    expect((await post(`${P()}/${person.id}/delete_events/?dry_run=true&purge_everything=1`)).status).toBe(400);
    expect(await personByDistinctId('dry-d')).toBeDefined();
    expect(await requestsOf(person.uuid)).toHaveLength(0);
  });
});

describe('a dry run spelled any other way (issue #43)', () => {
  // qs-style clients send dry_run[], JavaScript clients dryRun: a destructive endpoint refuses every
  // parameter or body member it does not declare, naming it, and nothing happens.
  const cases: Array<
    [string, (person: { id: number; uuid: string }) => Promise<{ status: number; body: any }>, string]
  > = [
    ['dry_run[]', (p) => del(`${P()}/${p.uuid}/?delete_events=true&dry_run[]=true`), 'dry_run[]'],
    ['dryRun', (p) => del(`${P()}/${p.uuid}/?delete_events=true&dryRun=true`), 'dryRun'],
    ['DRY_RUN', (p) => del(`${P()}/${p.uuid}/?delete_events=true&DRY_RUN=true`), 'DRY_RUN'],
    ['dry-run', (p) => del(`${P()}/${p.uuid}/?delete_events=true&dry-run=true`), 'dry-run'],
    ['dry_run[0]', (p) => del(`${P()}/${p.uuid}/?delete_events=true&dry_run[0]=true`), 'dry_run[0]'],
    ['dry_run%20', (p) => del(`${P()}/${p.uuid}/?delete_events=true&dry_run%20=true`), 'dry_run '],
    ['delete_events?dry_run[]', (p) => post(`${P()}/${p.id}/delete_events/?dry_run[]=true`), 'dry_run[]'],
    ['delete_recordings?dryRun', (p) => post(`${P()}/${p.id}/delete_recordings/?dryRun=true`), 'dryRun'],
    [
      'delete_events with {"dry_run": true} in a body it does not take',
      (p) => post(`${P()}/${p.id}/delete_events/`, { body: { dry_run: true } }),
      'dry_run',
    ],
    [
      'bulk_delete {"dryRun": true}',
      (p) => post(`${P()}/bulk_delete/`, { body: { ids: [p.uuid], delete_events: true, dryRun: true } }),
      'dryRun',
    ],
    [
      'bulk_delete?dry_run[]',
      (p) => post(`${P()}/bulk_delete/?dry_run[]=true`, { body: { ids: [p.uuid], delete_events: true } }),
      'dry_run[]',
    ],
    [
      'bulk_delete?delete_events=yes',
      (p) => post(`${P()}/bulk_delete/?delete_events=yes`, { body: { ids: [p.uuid] } }),
      'delete_events',
    ],
  ];
  it.each(cases)('%s: 400 naming it, and the person, its events and its requests stay', async (name, send, attr) => {
    const distinctId = `misspelt-${name.replace(/[^a-z0-9]/gi, '-')}`;
    await capture(api.baseUrl, account.projectToken, events(distinctId, 3));
    const person = await personByDistinctId(distinctId);
    const before = await countEvents(distinctId);
    const res = await send(person);
    expect(res.status, JSON.stringify(res.body)).toBe(400);
    expect(res.body).toMatchObject({ type: 'validation_error', attr });
    // An unknown parameter is named in the detail too; a known one with a bad value says what it takes.
    expect(res.body.detail).toMatch(name.endsWith('=yes') ? /valid boolean/ : attr);
    expect(await personByDistinctId(distinctId)).toMatchObject({ uuid: person.uuid });
    expect(await requestsOf(person.uuid)).toHaveLength(0);
    expect(await countEvents(distinctId)).toBe(before);
  });

  it('cancel refuses what it does not declare, and the request stays pending', async () => {
    await capture(api.baseUrl, account.projectToken, events('misspelt-cancel', 1));
    const person = await personByDistinctId('misspelt-cancel');
    const id = (await post(`${P()}/${person.id}/delete_events/`)).body.deletion_requests[0].id;
    for (const res of [
      await post(`${P()}/deletion_status/${id}/cancel/?dryRun=true`),
      await post(`${P()}/deletion_status/${id}/cancel/`, { body: { dryRun: true } }),
      await del(`${P()}/deletion_status/${id}/?dry_run[]=true`),
    ]) {
      expect(res.status, JSON.stringify(res.body)).toBe(400);
      expect(res.body.type).toBe('validation_error');
    }
    expect((await row(id)).status).toBe('pending');
  });
});

describe('from the command line (npm run manage)', () => {
  const manage = (...args: string[]) => manageJson(args, { REDIS_PREFIX: prefix });

  it('cancels a pending request (logged as system activity), refuses a claimed one, and lists cancelled ones', async () => {
    await capture(api.baseUrl, account.projectToken, events('cli-cancel', 2));
    const person = await personByDistinctId('cli-cancel');
    const made = await post(`${P()}/${person.id}/delete_events/`);
    const id = made.body.deletion_requests[0].id;

    const foreign = await manage('deletion', 'cancel', '--id', id, '--project', String(other.projectId));
    expect(foreign.code).toBe(1);
    expect(foreign.stderr).toContain(`No deletion request ${id}`);
    const cancelled = await manage('deletion', 'cancel', '--id', id);
    expect(cancelled.code, cancelled.stderr).toBe(0);
    expect(cancelled.json).toMatchObject({ id, status: 'cancelled', project: account.projectId });
    const [entry] = await sql(
      api.orm,
      `select user_id, is_system, activity from activity_log where scope = 'DeletionRequest' and item_id = ?`,
      [id],
    );
    expect(entry).toMatchObject({ user_id: null, is_system: true, activity: 'cancelled' });
    const listed = await manage('deletion', 'list', '--project', String(account.projectId), '--status', 'cancelled');
    expect(listed.code, listed.stderr).toBe(0);
    expect(listed.json.map((r: { id: string }) => r.id)).toContain(id);

    await capture(api.baseUrl, account.projectToken, [recording('cli-late', 's-cli-late')]);
    const rec = await post(`${P()}/${(await personByDistinctId('cli-late')).id}/delete_recordings/`);
    const recId = rec.body.deletion_requests[0].id;
    await eventually(async () => (await row(recId)).status === 'completed');
    const late = await manage('deletion', 'cancel', '--id', recId);
    expect(late.code).toBe(1);
    expect(late.stderr).toContain('is completed');
    expect((await manage('deletion', 'cancel', '--id', 'x1')).code).toBe(1);
  }, 60_000);
});
