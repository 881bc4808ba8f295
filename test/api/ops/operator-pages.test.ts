// The operator pages beside the API: the deletion requests page and the queue dashboard, in a browser
// that may not reach anything but this machine.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser } from 'playwright-core';
import { loadConfig } from '../../../shared/platform/config.ts';
import { markDeletionFailed } from '../../../shared/deletions/store.ts';
import { launchChromium } from '../../browser.ts';
import { capture } from '../../fixtures.ts';
import { call, createAccount, startApi, uniqueRedisPrefix, type TestAccount, type TestApi } from '../../helpers.ts';
import { localOnlyPage } from './local-only.ts';
import { missingPackage } from '../../packages.ts';

const READ = { username: 'admin', password: 'read-s3cret' };
const WRITE = { username: 'admin', password: 'write-s3cret' };

let api: TestApi;
let account: TestAccount;
let browser: Browser;
const screenshots = mkdtempSync(join(tmpdir(), 'operator-pages-'));

beforeAll(async () => {
  const prefix = uniqueRedisPrefix();
  api = await startApi((config) => {
    config.adminPassword = READ.password;
    config.adminWritePassword = WRITE.password;
    config.redisPrefix = prefix;
  });
  account = await createAccount(api.orm);
  if (!missingPackage('chromium')) browser = await launchChromium();
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

describe.skipIf(missingPackage('chromium'))('deletion requests page', () => {
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

  it('fits the window at 1280 and 390 px: the table scrolls in its own box, long ids and errors wrap', async () => {
    // A failed request with an unbroken error line and a long person id, beside the ones above.
    const kept = await newPerson(`page-wide-${'x'.repeat(120)}`);
    const queued = await call(api.baseUrl, 'POST', `${P()}/${kept.id}/delete_events/`, { key: account.apiKey });
    await markDeletionFailed(api.orm.em.fork(), queued.body.deletion_requests[0].id, `E${'0123456789'.repeat(40)}`, {
      retryFirstDelaySeconds: 900,
      retryMaxDelaySeconds: 21_600,
    });
    for (const width of [1280, 390]) {
      const { page } = await localOnlyPage(browser, { httpCredentials: READ, viewport: { width, height: 800 } });
      expect((await page.goto(`${api.baseUrl}/admin/deletions`))?.status()).toBe(200);
      const { scrollWidth, innerWidth, tableBoxWidth } = await page.evaluate(() => ({
        scrollWidth: document.documentElement.scrollWidth,
        innerWidth: window.innerWidth,
        tableBoxWidth: document.querySelector('.table-scroll')?.getBoundingClientRect().width ?? Infinity,
      }));
      expect(scrollWidth, `document at ${width} px`).toBeLessThanOrEqual(innerWidth);
      expect(tableBoxWidth, `table box at ${width} px`).toBeLessThanOrEqual(innerWidth);
      await page.screenshot({ path: join(screenshots, `deletions-${width}.png`), fullPage: true });
      await page.context().close();
    }
  });
});

const as = (credential: typeof READ) => ({ headers: { authorization: basic(credential) } });

describe.skipIf(missingPackage('chromium'))('queue dashboard', () => {
  it('loads from this machine alone, and its deep links never answer 500', async () => {
    const job = await api.deps.queues.deletions.add('reconcile', {}, { delay: 3_600_000 });
    const { page, outside } = await localOnlyPage(browser, { httpCredentials: READ });
    const answers: string[] = [];
    page.on('response', (response) => answers.push(`${response.status()} ${response.url()}`));
    expect((await page.goto(`${api.baseUrl}/admin/queues`))?.status()).toBe(200);
    await page.getByText('experiment-results').first().waitFor();
    // The deletion requests page is a link in the board's menu.
    await page.locator('header button[aria-haspopup="menu"]').click();
    const link = page.getByRole('menuitem', { name: 'Deletion requests' });
    expect(await link.getAttribute('href')).toBe('/admin/deletions');

    // Deep links a person might bookmark or paste, each loaded as a page as well as over HTTP.
    const pages = [
      '/admin/queues/queue/deletions',
      `/admin/queues/queue/deletions/${job.id}`,
      '/admin/queues/queue/deletions/no-such-job',
      '/admin/queues/queue/no-such-queue',
      '/admin/queues/queue/no-such-queue/1',
      '/admin/queues/job-schedulers',
    ];
    for (const path of pages) {
      expect((await call(api.baseUrl, 'GET', path, as(READ))).status, path).toBe(200);
      await page.goto(`${api.baseUrl}${path}`, { waitUntil: 'networkidle' });
    }
    await page.goto(`${api.baseUrl}/admin/queues/queue/deletions/${job.id}`, { waitUntil: 'networkidle' });
    const file = join(screenshots, 'dashboard-job.png');
    expect((await page.screenshot({ path: file })).length, file).toBeGreaterThan(15_000);
    expect(answers.filter((answer) => Number(answer.slice(0, 3)) >= 500)).toEqual([]);
    expect(outside()).toEqual([]);
    await page.context().close();

    // Paths it does not serve: 404, never 500 (its error handler used to turn the app's 404 into one).
    const missing = [
      '/admin/queues/no-such-page',
      '/admin/queues/static/no-such-file.js',
      '/admin/queues/api/no-such-endpoint',
      '/admin/queues/api/queues/no-such-queue/1',
      '/admin/queues/api/queues/deletions/no-such-job',
    ];
    for (const path of missing) {
      const res = await call(api.baseUrl, 'GET', path, as(READ));
      expect(res.status, `${path}: ${res.text.slice(0, 200)}`).toBe(404);
    }
    // Malformed escapes: the page (whose UI says what is missing) for a page path, 404 for the API.
    const page404 = await call(api.baseUrl, 'GET', '/admin/queues/queue/%E0%A4%A', as(READ));
    expect(page404.status).toBe(200);
    expect(page404.text).toContain('<!DOCTYPE html>');
    const api404 = await call(api.baseUrl, 'GET', '/admin/queues/api/queues/%E0%A4%A/1', as(READ));
    expect(api404.status, api404.text).toBe(404);
  }, 120_000);

  it('with ADMIN_PASSWORD refuses every change with 403; ADMIN_WRITE_PASSWORD may change', async () => {
    const queue = api.deps.queues.deletions;
    const job = await queue.add('reconcile', {}, { delay: 3_600_000 });
    const readOnly = async (credential: typeof READ) =>
      (await call(api.baseUrl, 'GET', '/admin/queues/api/queues', as(credential))).body.queues.map(
        (q: any) => q.readOnlyMode,
      );
    // One entry per queue (deletions, experiment results, maintenance, webhooks).
    const queues = Object.keys(api.deps.queues).length;
    expect(queues).toBe(4);
    expect(await readOnly(READ)).toEqual(Array(queues).fill(true));
    expect(await readOnly(WRITE)).toEqual(Array(queues).fill(false));

    const q = '/admin/queues/api/queues/deletions';
    const changes: [string, string][] = [
      ['PUT', `${q}/pause`],
      ['PUT', '/admin/queues/api/queues/pause'],
      ['PUT', `${q}/empty`],
      ['PUT', `${q}/obliterate`],
      ['PUT', `${q}/clean/completed`],
      ['PUT', `${q}/retry/failed`],
      ['PUT', `${q}/promote`],
      ['PUT', `${q}/${job.id}/promote`],
      ['PUT', `${q}/${job.id}/clean`],
      ['PATCH', `${q}/${job.id}/update-data`],
      ['POST', `${q}/add`],
      ['DELETE', `${q}/${job.id}`],
    ];
    for (const [method, path] of changes) {
      const res = await call(api.baseUrl, method, path, { ...as(READ), body: {} });
      expect(res.status, `${method} ${path}`).toBe(403);
      expect(res.body).toMatchObject({ type: 'authentication_error', code: 'permission_denied', attr: null });
    }
    expect(await queue.isPaused()).toBe(false);
    expect(await (await queue.getJob(job.id!))?.getState()).toBe('delayed');

    const write = async (path: string) => (await call(api.baseUrl, 'PUT', path, as(WRITE))).status;
    expect(await write(`${q}/pause`)).toBe(200);
    expect(await queue.isPaused()).toBe(true);
    expect(await write(`${q}/resume`)).toBe(200);
    expect(await queue.isPaused()).toBe(false);
    expect(await write(`${q}/${job.id}/clean`)).toBe(204);
    expect(await queue.getJob(job.id!)).toBeUndefined();
    // Either credential reads the deletion requests page.
    expect((await call(api.baseUrl, 'GET', '/admin/deletions', as(WRITE))).status).toBe(200);
  });

  it('refuses an ADMIN_WRITE_PASSWORD equal to ADMIN_PASSWORD (every read would be a write)', () => {
    expect(() => loadConfig({ ADMIN_PASSWORD: 'same', ADMIN_WRITE_PASSWORD: 'same' })).toThrow(
      'ADMIN_WRITE_PASSWORD must differ from ADMIN_PASSWORD',
    );
    expect(loadConfig({ ADMIN_PASSWORD: 'a', ADMIN_WRITE_PASSWORD: 'b' }).adminWritePassword).toBe('b');
  });
});
