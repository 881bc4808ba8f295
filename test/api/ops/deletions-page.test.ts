// The operators' deletion requests page over HTTP (the browser test in operator-pages.test.ts needs
// Chromium): filtered by status (cancelled and completed as well as those not done), each verified
// request linking to its signed receipt (JSON, the API's same receipt) and naming the key that signed it.
import { canonicalJson } from '../../../shared/platform/canonical-json.ts';
import { beforeAll, describe, expect, it } from 'vitest';
import { verifyReceiptSignature, receiptKeys } from '../../../shared/deletions/receipts.ts';
import { capture } from '../../fixtures.ts';
import { call, eventually, apiAndWorker } from '../../helpers.ts';

const READ = { username: 'admin', password: 'read-s3cret' };
const {
  api,
  worker,
  accounts: [account],
} = await apiAndWorker({
  configure: (config) => {
    config.adminPassword = READ.password;
  },
});

const auth = {
  headers: { authorization: `Basic ${Buffer.from(`${READ.username}:${READ.password}`).toString('base64')}` },
};
const P = () => `/api/projects/${account.projectId}/persons`;
const page = async (query: string) => {
  const res = await call(api.baseUrl, 'GET', `/admin/deletions?project=${account.projectId}${query}`, auth);
  expect(res.status, res.text).toBe(200);
  return res.text;
};
/** The table row of request `id` in a page, or null. */
const rowOf = (html: string, id: string) =>
  html.match(new RegExp(`<tr data-id="${id}" data-status="[a-z]+">.*?</tr>`, 's'))?.[0] ?? null;

async function newPerson(distinctId: string): Promise<{ id: number; uuid: string }> {
  await capture(api.baseUrl, account.projectToken, [{ event: 'seed', distinct_id: distinctId }]);
  const res = await call(api.baseUrl, 'GET', `${P()}/?distinct_id=${distinctId}`, { key: account.apiKey });
  return res.body.results[0];
}

describe('deletion requests page: cancelled and completed requests, with receipts', () => {
  let cancelledId: string;
  let completedId: string;
  let pendingId: string;

  beforeAll(async () => {
    // Cancelled: an off-peak request cancelled before its window.
    const kept = await newPerson('dp-cancelled');
    const queued = await call(api.baseUrl, 'POST', `${P()}/${kept.id}/delete_events/`, { key: account.apiKey });
    cancelledId = queued.body.deletion_requests[0].id;
    const cancelled = await call(api.baseUrl, 'POST', `${P()}/deletion_status/${cancelledId}/cancel/`, {
      key: account.apiKey,
    });
    expect(cancelled.status, cancelled.text).toBe(200);
    // Pending: another off-peak request, left waiting.
    const waiting = await newPerson('dp-pending');
    pendingId = (await call(api.baseUrl, 'POST', `${P()}/${waiting.id}/delete_events/`, { key: account.apiKey })).body
      .deletion_requests[0].id;
    // Completed: a person deleted with their events, its weekly window released now, verified by the worker.
    const gone = await newPerson('dp-completed');
    const deleted = await call(api.baseUrl, 'DELETE', `${P()}/${gone.id}/?delete_events=true`, { key: account.apiKey });
    expect(deleted.status).toBe(204);
    await worker.deps.queues.deletions.add('release-batch', { mode: 'weekly' });
    completedId = await eventually(async () => {
      const status = await call(api.baseUrl, 'GET', `${P()}/deletion_status/?person_uuid=${gone.uuid}`, {
        key: account.apiKey,
      });
      const done = status.body.results.find((r: { status: string }) => r.status === 'completed');
      return done?.id ?? null;
    });
  });

  it('the default shows the requests not done; ?status=cancelled the cancelled one, with when it was cancelled', async () => {
    const open = await page('');
    expect(rowOf(open, pendingId)).not.toBeNull();
    expect(rowOf(open, cancelledId)).toBeNull();
    expect(rowOf(open, completedId)).toBeNull();
    // Every status is a filter link, and the counts include cancelled and completed.
    for (const s of ['pending', 'running', 'failed', 'cancelled', 'completed'])
      expect(open).toContain(`data-status="${s}">${s}</a>`);
    expect(open).toMatch(/cancelled <b>\d+<\/b>/);

    const cancelled = await page('&status=cancelled');
    expect(cancelled).toContain('<h1>Cancelled deletion requests');
    const row = rowOf(cancelled, cancelledId);
    expect(row).toContain('data-status="cancelled"');
    expect(row).toMatch(/cancelled <time datetime="[^"]+Z">/);
    expect(row).not.toContain('receipt (JSON)');
    expect(rowOf(cancelled, pendingId)).toBeNull();
    expect(rowOf(cancelled, completedId)).toBeNull();

    const bad = await call(api.baseUrl, 'GET', '/admin/deletions?status=gone', auth);
    expect(bad.status).toBe(400);
    expect(bad.body).toMatchObject({ type: 'validation_error', attr: 'status' });
  });

  it('?status=completed links each verified request to its receipt (JSON) and names its key', async () => {
    const completed = await page('&status=completed');
    const row = rowOf(completed, completedId);
    expect(row).toContain('data-status="completed"');
    expect(row).toMatch(/verified <time datetime="[^"]+Z">/);
    const href = row!.match(/<a href="([^"]+)" class="receipt">receipt \(JSON\)<\/a>/)?.[1];
    expect(href).toBe(`/admin/deletions/receipts/${completedId}`);
    const keyId = row!.match(/<code class="key-id">([0-9a-f]{16})<\/code>/)?.[1];

    // The link serves the signed receipt, the API's same one, verifiable with the named key.
    const receipt = await call(api.baseUrl, 'GET', href!, auth);
    expect(receipt.status, receipt.text).toBe(200);
    expect(receipt.body).toMatchObject({ request_id: completedId, key_id: keyId, algorithm: 'Ed25519' });
    const fromApi = await call(api.baseUrl, 'GET', `${P()}/deletion_receipts/${completedId}/`, {
      key: account.apiKey,
    });
    expect(fromApi.status, fromApi.text).toBe(200);
    expect(fromApi.body).toEqual(receipt.body);
    expect(receipt.body.signed_content).toBe(canonicalJson(receipt.body.receipt));
    const key = (await receiptKeys(api.orm.em.fork())).find((k) => k.key_id === keyId);
    expect(verifyReceiptSignature(receipt.body.signed_content, receipt.body.signature, key!.public_key)).toBe(true);

    // Behind the operator credential; an unknown or malformed id is a 404.
    expect((await call(api.baseUrl, 'GET', href!)).status).toBe(401);
    expect((await call(api.baseUrl, 'GET', `/admin/deletions/receipts/${pendingId}`, auth)).status).toBe(404);
    expect((await call(api.baseUrl, 'GET', '/admin/deletions/receipts/abc', auth)).status).toBe(404);
    expect((await call(api.baseUrl, 'POST', href!, auth)).status).toBe(405);
  });
});
