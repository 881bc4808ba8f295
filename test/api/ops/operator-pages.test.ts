// The operator pages beside the API: the deletion requests page and the queue dashboard, in a browser
// that may not reach anything but this machine.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser } from 'playwright-core';
import { markDeletionFailed } from '../../../shared/deletions/store.ts';
import { launchChromium } from '../../browser.ts';
import { capture } from '../../fixtures.ts';
import { call, createAccount, startApi, uniqueRedisPrefix, type TestAccount, type TestApi } from '../../helpers.ts';
import { localOnlyPage } from './local-only.ts';

const READ = { username: 'admin', password: 'read-s3cret' };

let api: TestApi;
let account: TestAccount;
let browser: Browser;
const screenshots = mkdtempSync(join(tmpdir(), 'operator-pages-'));

beforeAll(async () => {
  const prefix = uniqueRedisPrefix();
  api = await startApi((config) => {
    config.adminPassword = READ.password;
    config.redisPrefix = prefix;
  });
  account = await createAccount(api.orm);
  browser = await launchChromium();
});
afterAll(async () => {
  await browser?.close();
  await api.close();
});

const basic = ({ username, password }: { username: string; password: string }) =>
  `Basic ${Buffer.from(`${username}:${password}`).toString('base64')}`;
const P = () => `/api/projects/${account.projectId}/persons`;

async function newPerson(distinctId: string): Promise<{ id: number; uuid: string }> {
  await capture(api.baseUrl, account.projectToken, [{ event: 'seed', distinct_id: distinctId }]);
  const res = await call(api.baseUrl, 'GET', `${P()}/?distinct_id=${distinctId}`, { key: account.apiKey });
  return res.body.results[0];
}

describe('deletion requests page', () => {
  it('shows pending and failed requests, with when each runs, to the operator credential only', async () => {
    // Pending: a person deleted with their events waits for the weekly window (no queue job yet).
    const gone = await newPerson('page-weekly');
    const deleted = await call(api.baseUrl, 'DELETE', `${P()}/${gone.id}/?delete_events=true`, { key: account.apiKey });
    expect(deleted.status).toBe(204);
    // Failed: an off-peak request whose job failed for good, due again later.
    const kept = await newPerson('page-off-peak');
    const queued = await call(api.baseUrl, 'POST', `${P()}/${kept.id}/delete_events/`, { key: account.apiKey });
    const failedId = queued.body.deletion_requests[0].id;
    await markDeletionFailed(api.orm.em.fork(), failedId, 'canceling statement due to statement timeout', {
      retryFirstDelaySeconds: 900,
      retryMaxDelaySeconds: 21_600,
    });
    const status = await call(api.baseUrl, 'GET', `${P()}/deletion_status/`, { key: account.apiKey });
    const pendingId = status.body.results.find((r: any) => r.person_uuid === gone.uuid).id;

    const path = `/admin/deletions?project=${account.projectId}`;
    expect((await call(api.baseUrl, 'GET', path)).status).toBe(401);
    const wrong = { headers: { authorization: basic({ ...READ, password: 'nope' }) } };
    expect((await call(api.baseUrl, 'GET', path, wrong)).status).toBe(401);
    const right = { headers: { authorization: basic(READ) } };
    expect((await call(api.baseUrl, 'POST', path, right)).status).toBe(405);
    expect((await call(api.baseUrl, 'GET', '/admin/deletions?project=x', right)).status).toBe(400);

    const { page, outside } = await localOnlyPage(browser, { httpCredentials: READ });
    const response = await page.goto(`${api.baseUrl}${path}`);
    expect(response?.status()).toBe(200);
    const rows = page.locator('tbody tr');
    expect(await rows.count()).toBe(2);
    // Failed first, then the pending one.
    const failed = page.locator(`tr[data-id="${failedId}"]`);
    expect(await rows.first().getAttribute('data-id')).toBe(failedId);
    const failedText = await failed.textContent();
    for (const text of ['person_events', 'off_peak', 'failed', kept.uuid, 'statement timeout', 'retry']) {
      expect(failedText).toContain(text);
    }
    expect(await failed.locator('td').nth(9).textContent()).toBe('1'); // failures
    const pending = page.locator(`tr[data-id="${pendingId}"]`);
    const pendingText = await pending.textContent();
    for (const text of ['person_events', 'weekly', 'pending', gone.uuid, 'weekly window']) {
      expect(pendingText).toContain(text);
    }
    // The next weekly window: within a week from now.
    const window = await pending.locator('td').nth(7).locator('time').getAttribute('datetime');
    const ahead = Date.parse(window!) - Date.now();
    expect(ahead).toBeGreaterThan(0);
    expect(ahead).toBeLessThanOrEqual(7 * 86_400_000);
    expect(await page.getByRole('link', { name: 'Queue dashboard' }).getAttribute('href')).toBe('/admin/queues');

    const file = join(screenshots, 'deletions.png');
    const png = await page.screenshot({ path: file, fullPage: true });
    expect(png.length, file).toBeGreaterThan(15_000);
    expect(await failed.isVisible()).toBe(true);
    expect(await pending.isVisible()).toBe(true);
    expect(outside()).toEqual([]);
    await page.context().close();
  });
});
