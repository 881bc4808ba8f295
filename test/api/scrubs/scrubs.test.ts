// Scrubs by content through the API (issue #47 item 3): a dry run's count equals what the scrub then
// deletes; strip_properties removes only the keys; the receipt verifies with openssl; cancel,
// Idempotency-Key, unknown members refused, the off-peak window against mode now; recordings by
// distinct ids and time range. Real API, real in-process BullMQ worker, PostgreSQL and Redis.
import { execFile } from 'node:child_process';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { sql } from '../../db.ts';
import { capture } from '../../fixtures.ts';
import { apiAndWorker, call, eventually } from '../../helpers.ts';
import { reconcileScrubs } from '../../../shared/scrubs/index.ts';

const exec = promisify(execFile);
const {
  api,
  worker,
  accounts: [account],
} = await apiAndWorker({ accounts: 1 });

const B = `/api/projects/${account.projectId}`;
const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
  call(api.baseUrl, 'POST', path, { key: account.apiKey, body, headers });
const get = (path: string) => call(api.baseUrl, 'GET', path, { key: account.apiKey });
const hourAgo = () => new Date(Date.now() - 3_600_000).toISOString();
const soon = () => new Date(Date.now() + 3_600_000).toISOString();
const eventsOf = async (distinctId: string) =>
  sql<{ event: string; properties: Record<string, unknown> }>(
    api.orm,
    `select event, properties from event where project_id = ? and distinct_id = ? order by (properties->>'i')::int`,
    [account.projectId, distinctId],
  );
/** Waits for the scrub to leave pending and running, and answers it. */
const settled = (collection: string, id: string) =>
  eventually(async () => {
    const r = await get(`${B}/${collection}/${id}/`);
    return ['completed', 'failed', 'cancelled'].includes(r.body.status) ? r.body : null;
  });

async function opensslVerifies(content: string, signatureB64: string, publicKeyPem: string): Promise<boolean> {
  const dir = await mkdtemp(join(tmpdir(), 'scrub-receipt-'));
  const [pub, body, sig] = ['key.pem', 'body.json', 'body.sig'].map((f) => join(dir, f));
  await writeFile(pub, publicKeyPem);
  await writeFile(body, content);
  await writeFile(sig, Buffer.from(signatureB64, 'base64'));
  try {
    await exec('openssl', ['pkeyutl', '-verify', '-pubin', '-inkey', pub, '-rawin', '-in', body, '-sigfile', sig]);
    return true;
  } catch {
    return false;
  }
}

describe('event scrubs', () => {
  it("a dry run's count equals what the scrub deletes; the receipt verifies with openssl, a changed byte fails", async () => {
    await capture(api.baseUrl, account.projectToken, [
      ...Array.from({ length: 6 }, (_, i) => ({
        event: 'signup',
        distinct_id: 'scrub-a',
        properties: { i, plan: 'free' },
      })),
      ...Array.from({ length: 3 }, (_, i) => ({
        event: 'signup',
        distinct_id: 'scrub-a',
        properties: { i: 10 + i, plan: 'paid' },
      })),
      ...Array.from({ length: 2 }, (_, i) => ({
        event: 'other',
        distinct_id: 'scrub-a',
        properties: { i: 20 + i, plan: 'free' },
      })),
    ]);
    const body = {
      event: 'signup',
      properties: [{ key: 'plan', value: 'free', operator: 'exact', type: 'event' }],
      after: hourAgo(),
      before: soon(),
      distinct_ids: ['scrub-a'],
      action: 'delete',
      mode: 'now',
    };
    const dry = await post(`${B}/event_scrubs/?dry_run=true`, body);
    expect(dry.status, dry.text).toBe(200);
    expect(dry.body.would_change).toEqual({ postgres: 6 });
    expect((await eventsOf('scrub-a')).length).toBe(11); // nothing written

    const made = await post(`${B}/event_scrubs/`, body);
    expect(made.status, made.text).toBe(202);
    expect(made.body).toMatchObject({ target: 'events', action: 'delete', mode: 'now', status: 'pending' });
    const done = await settled('event_scrubs', made.body.id);
    expect(done.status, done.last_error).toBe('completed');
    expect(done.counts_before).toEqual({ postgres: 6 });
    expect(done.counts_after).toEqual({ postgres: 0 });
    expect(done.rows_changed).toEqual({ postgres: 6 });
    const left = await eventsOf('scrub-a');
    expect(left.length).toBe(5);
    expect(left.every((e) => e.event === 'other' || e.properties.plan === 'paid')).toBe(true);

    const r = done.receipt;
    expect(r.body).toMatchObject({ scrub_id: made.body.id, stores: { postgres: { before: 6, after: 0 } } });
    expect(JSON.stringify(r.body)).not.toContain('free'); // the filter's values are cited by hash only
    const key = await get(`${B}/persons/deletion_receipts/public_key/`);
    const pem = key.body.keys.find((k: { key_id: string }) => k.key_id === r.key_id).public_key;
    expect(await opensslVerifies(r.signed_content, r.signature, pem)).toBe(true);
    expect(await opensslVerifies(r.signed_content.replace('"after":0', '"after":1'), r.signature, pem)).toBe(false);
  });

  it('strip_properties removes only the keys, of the matching events only', async () => {
    await capture(api.baseUrl, account.projectToken, [
      { event: 'form', distinct_id: 'scrub-s', properties: { i: 1, email: 'a@x.io', phone: '1', keep: 'k' } },
      { event: 'form', distinct_id: 'scrub-s', properties: { i: 2, email: 'b@x.io', keep: 'k' } },
      { event: 'form', distinct_id: 'scrub-s', properties: { i: 3, keep: 'k' } },
      { event: 'view', distinct_id: 'scrub-s', properties: { i: 4, email: 'c@x.io' } },
    ]);
    const body = {
      event: 'form',
      after: hourAgo(),
      before: soon(),
      distinct_ids: ['scrub-s'],
      action: 'strip_properties',
      keys: ['email', 'phone'],
      mode: 'now',
    };
    const dry = await post(`${B}/event_scrubs/?dry_run=true`, body);
    expect(dry.body.would_change).toEqual({ postgres: 2 }); // the form events that carry a key
    const made = await post(`${B}/event_scrubs/`, body);
    const done = await settled('event_scrubs', made.body.id);
    expect(done.status, done.last_error).toBe('completed');
    expect(done.rows_changed).toEqual({ postgres: 2 });
    const props = (await eventsOf('scrub-s')).map((e) => e.properties);
    expect(props.map(({ $lib, $lib_version, $geoip_disable, ...p }) => p)).toEqual([
      expect.objectContaining({ i: 1, keep: 'k' }),
      expect.objectContaining({ i: 2, keep: 'k' }),
      expect.objectContaining({ i: 3, keep: 'k' }),
      expect.objectContaining({ i: 4, email: 'c@x.io' }), // another event name: untouched
    ]);
    expect(props.slice(0, 3).some((p) => 'email' in p || 'phone' in p)).toBe(false);
  });

  it('unknown members, a range too long and a malformed filter are 400s; nothing is recorded', async () => {
    const base = { event: 'e', after: hourAgo(), before: soon(), action: 'delete' };
    const before = (await get(`${B}/event_scrubs/`)).body.count;
    for (const [body, path] of [
      [{ ...base, dryrun: true }, ''],
      [base, '?dry_run=true&dryRun=1'],
      [{ ...base, after: '2024-01-01T00:00:00Z', before: '2025-06-01T00:00:00Z' }, ''],
      [{ ...base, properties: [{ key: 'x', operator: 'nope', value: 1 }] }, ''],
      [{ ...base, keys: ['a'] }, ''],
      [{ ...base, action: 'strip_properties' }, ''],
      [{ after: hourAgo(), before: soon(), action: 'delete' }, ''],
      [{ ...base, distinct_ids: Array.from({ length: 2001 }, (_, i) => `d${i}`) }, ''],
    ] as const) {
      const r = await post(`${B}/event_scrubs/${path}`, body);
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(r.body).toMatchObject({ type: 'validation_error' });
    }
    expect((await get(`${B}/event_scrubs/`)).body.count).toBe(before);
  });

  it('Idempotency-Key: a retry answers the first answer and records nothing new; another request with it is 422', async () => {
    const body = { event: 'never', after: hourAgo(), before: soon(), action: 'delete' };
    const headers = { 'Idempotency-Key': `scrub-${Date.now()}` };
    const first = await post(`${B}/event_scrubs/`, body, headers);
    const again = await post(`${B}/event_scrubs/`, body, headers);
    expect(again.status).toBe(202);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.body.id).toBe(first.body.id);
    const [{ n }] = await sql<{ n: number }>(
      api.orm,
      `select count(*)::int as n from event_scrub where project_id = ? and filter->>'event' = 'never'`,
      [account.projectId],
    );
    expect(n).toBe(1);
    const other = await post(`${B}/event_scrubs/`, { ...body, event: 'another' }, headers);
    expect(other.status).toBe(422);
  });

  it('off_peak (the default) waits for the window; cancel while pending keeps the data; mode now runs at once', async () => {
    await capture(api.baseUrl, account.projectToken, [{ event: 'late', distinct_id: 'scrub-w', properties: { i: 1 } }]);
    const body = { event: 'late', after: hourAgo(), before: soon(), action: 'delete' };
    const waiting = await post(`${B}/event_scrubs/`, body);
    expect(waiting.body.mode).toBe('off_peak');
    expect(Date.parse(waiting.body.run_after)).toBeGreaterThan(Date.now());
    // The reconciler hands over only due scrubs: this one gets no job before its window.
    await reconcileScrubs(worker.deps);
    expect(await worker.deps.queues.deletions.getJob(`scrub-${waiting.body.id}`)).toBeUndefined();

    const cancelled = await post(`${B}/event_scrubs/${waiting.body.id}/cancel/`, {});
    expect(cancelled.status, cancelled.text).toBe(200);
    expect(cancelled.body.status).toBe('cancelled');
    expect((await post(`${B}/event_scrubs/${waiting.body.id}/cancel/`, {})).status).toBe(200); // again: the same
    expect((await eventsOf('scrub-w')).length).toBe(1);

    // Another, whose window opens: the reconciler hands it over and it runs.
    const windowed = await post(`${B}/event_scrubs/`, body);
    await sql(api.orm, `update event_scrub set run_after = now() - interval '1 second' where id = ?`, [
      windowed.body.id,
    ]);
    await reconcileScrubs(worker.deps);
    const done = await settled('event_scrubs', windowed.body.id);
    expect(done.status).toBe('completed');
    expect((await eventsOf('scrub-w')).length).toBe(0);
    const tooLate = await post(`${B}/event_scrubs/${windowed.body.id}/cancel/`, {});
    expect(tooLate.status).toBe(409);
  });

  it('events received after the request are not scrubbed (the cutoff)', async () => {
    await capture(api.baseUrl, account.projectToken, [{ event: 'cut', distinct_id: 'scrub-c', properties: { i: 1 } }]);
    const made = await post(`${B}/event_scrubs/`, { event: 'cut', after: hourAgo(), before: soon(), action: 'delete' });
    await capture(api.baseUrl, account.projectToken, [{ event: 'cut', distinct_id: 'scrub-c', properties: { i: 2 } }]);
    await sql(api.orm, `update event_scrub set run_after = now() where id = ?`, [made.body.id]);
    await reconcileScrubs(worker.deps);
    const done = await settled('event_scrubs', made.body.id);
    expect(done.status).toBe('completed');
    expect((await eventsOf('scrub-c')).map((e) => e.properties.i)).toEqual([2]);
  });
});

describe('scrub webhooks', () => {
  it('queued, running and completed are delivered to a subscribed webhook; the completed one carries the receipt', async () => {
    const hook = await post(`${B}/webhooks/`, {
      url: 'http://hooks.example.com:9/hook',
      event_types: ['scrub.queued', 'scrub.running', 'scrub.completed', 'scrub.cancelled'],
    });
    expect(hook.status, hook.text).toBe(201);
    try {
      await capture(api.baseUrl, account.projectToken, [{ event: 'hooked', distinct_id: 'scrub-h', properties: {} }]);
      const made = await post(`${B}/event_scrubs/`, {
        event: 'hooked',
        after: hourAgo(),
        before: soon(),
        action: 'delete',
        mode: 'now',
      });
      const done = await settled('event_scrubs', made.body.id);
      expect(done.status).toBe('completed');
      const deliveries = await sql<{
        event_type: string;
        payload: { scrub: { id: string; status: string; receipt: unknown } };
      }>(api.orm, `select event_type, payload from webhook_delivery where webhook_id = ? order by id`, [hook.body.id]);
      expect(deliveries.map((d) => [d.event_type, d.payload.scrub.id, d.payload.scrub.status])).toEqual([
        ['scrub.queued', made.body.id, 'pending'],
        ['scrub.running', made.body.id, 'running'],
        ['scrub.completed', made.body.id, 'completed'],
      ]);
      expect(deliveries[2].payload.scrub.receipt).toMatchObject({ signature: done.receipt.signature });
    } finally {
      await call(api.baseUrl, 'DELETE', `${B}/webhooks/${hook.body.id}/`, { key: account.apiKey });
    }
  });
});

describe('recording scrubs', () => {
  it('deletes the recordings of the distinct ids that started in the range, with their snapshots; a dry run counts them first', async () => {
    const snap = (distinctId: string, session: string, timestamp: string) => ({
      event: '$snapshot',
      distinct_id: distinctId,
      timestamp,
      properties: { $session_id: session, $snapshot_data: { a: 1 } },
    });
    const t0 = new Date(Date.now() - 10 * 86_400_000).toISOString();
    const now = new Date(Date.now() - 60_000).toISOString();
    await capture(api.baseUrl, account.projectToken, [
      snap('rec-a', 'rs-1', now),
      snap('rec-a', 'rs-1', now),
      snap('rec-a', 'rs-2', t0), // started before the range
      snap('rec-b', 'rs-3', now), // another distinct id
    ]);
    const recordings = async () =>
      (
        await sql<{ session_id: string }>(
          api.orm,
          `select session_id from session_recording where project_id = ? and session_id like 'rs-%' order by session_id`,
          [account.projectId],
        )
      ).map((r) => r.session_id);
    await eventually(async () => ((await recordings()).length === 3 ? true : null));
    const body = { distinct_ids: ['rec-a'], after: hourAgo(), before: soon(), mode: 'now' };
    const dry = await post(`${B}/recording_scrubs/?dry_run=true`, body);
    expect(dry.status, dry.text).toBe(200);
    expect(dry.body.would_change.recordings).toBe(1);
    const made = await post(`${B}/recording_scrubs/`, body);
    expect(made.status, made.text).toBe(202);
    const done = await settled('recording_scrubs', made.body.id);
    expect(done.status, done.last_error).toBe('completed');
    expect(done.counts_before.recordings).toBe(1);
    expect(done.counts_after).toEqual({ recordings: 0, snapshots: 0 });
    expect(await recordings()).toEqual(['rs-2', 'rs-3']);
    expect(await call(api.baseUrl, 'GET', `${B}/event_scrubs/${made.body.id}/`, { key: account.apiKey })).toMatchObject(
      {
        status: 404,
      },
    );
    const unknown = await post(`${B}/recording_scrubs/`, { ...body, action: 'strip_properties' });
    expect(unknown.status).toBe(400);
  });
});
