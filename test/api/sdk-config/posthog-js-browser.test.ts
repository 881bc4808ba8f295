// posthog-js (the npm package's browser build, as sites load it) in headless Chromium against the
// real API, from a page on another origin: remote config, capture, identify and a launched
// experiment's flag, with no failed request and no console error on the way.
import { createServer, type Server } from 'node:http';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser } from 'playwright-core';
import { launchChromium } from '../../browser.ts';
import { personsOf, sql } from '../../db.ts';
import { apiWithAccount, call, eventually } from '../../helpers.ts';
import { missingPackage } from '../../packages.ts';

const { api, account } = await apiWithAccount();
const FLAG = 'browser-exp';
const USER = 'browser-user-1';

/** The site: one page and the SDK's browser build from node_modules (posthog-js is a dev dependency). */
function startSite(sdk: string): Promise<Server> {
  const page = `<!doctype html><html><head><title>shop</title><script src="/posthog.js"></script></head>
<body><button id="buy">Buy</button></body></html>`;
  const server = createServer((req, res) => {
    if (req.url === '/posthog.js') res.writeHead(200, { 'content-type': 'application/javascript' }).end(sdk);
    else if (req.url === '/') res.writeHead(200, { 'content-type': 'text/html' }).end(page);
    else if (req.url === '/favicon.ico') res.writeHead(204).end();
    else res.writeHead(404).end();
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

let browser: Browser;
let site: Server;
beforeAll(async () => {
  const sdk = readFileSync(createRequire(import.meta.url).resolve('posthog-js/dist/array.js'), 'utf8');
  site = await startSite(sdk);
  if (!missingPackage('chromium')) browser = await launchChromium();
});
afterAll(async () => {
  await browser?.close();
  await new Promise((resolve) => site?.close(resolve));
});

describe.skipIf(missingPackage('chromium'))('posthog-js in a browser', () => {
  it('loads remote config, captures, identifies and reads an experiment’s flag without a failed request', async () => {
    const P = `/api/projects/${account.projectId}/experiments`;
    const key = account.apiKey;
    const exp = await call(api.baseUrl, 'POST', `${P}/`, { key, body: { name: 'Browser', feature_flag_key: FLAG } });
    expect(exp.status).toBe(201);
    const launch = { start_date: new Date(Date.now() - 60_000).toISOString() };
    expect((await call(api.baseUrl, 'PATCH', `${P}/${exp.body.id}/`, { key, body: launch })).status).toBe(200);

    const page = await browser.newPage();
    const problems: string[] = [];
    const apiAnswers: string[] = [];
    page.on('requestfailed', (request) => problems.push(`failed: ${request.url()} ${request.failure()?.errorText}`));
    page.on('response', (response) => {
      if (!response.url().startsWith(api.baseUrl)) return;
      apiAnswers.push(`${response.status()} ${new URL(response.url()).pathname}`);
      if (response.status() >= 400) problems.push(`${response.status()}: ${response.url()}`);
    });
    page.on('console', (message) => {
      if (message.type() === 'error') problems.push(`console: ${message.text()} (${message.location().url})`);
    });
    page.on('pageerror', (error) => problems.push(`page error: ${error.message}`));

    const siteUrl = `http://localhost:${(site.address() as AddressInfo).port}/`; // another origin than the API
    await page.goto(siteUrl);
    const flag = await page.evaluate(
      ({ token, apiHost, flagKey, user }) =>
        new Promise<unknown>((resolve, reject) => {
          const posthog = (window as any).posthog;
          setTimeout(() => reject(new Error('posthog-js did not load flags')), 15_000);
          posthog.init(token, {
            api_host: apiHost,
            opt_out_useragent_filter: true, // headless Chromium is a bot to posthog-js, whose events it drops
            loaded: (ph: any) => {
              ph.capture('checkout started', { cart_size: 3 });
              ph.identify(user, { email: 'browser@example.com' });
              // After identify the SDK reloads flags for the identified person; wait for that answer.
              ph.onFeatureFlags(() => {
                const value = ph.getFeatureFlag(flagKey);
                if (ph.get_distinct_id() === user && value !== undefined) resolve(value);
              });
            },
          });
        }),
      { token: account.projectToken, apiHost: api.baseUrl, flagKey: FLAG, user: USER },
    );

    // What the server says for the identified person is what the SDK got.
    const ask = { token: account.projectToken, distinct_id: USER };
    const server = await call(api.baseUrl, 'POST', '/flags/?v=2', { body: ask });
    expect(['control', 'test']).toContain(flag);
    expect(flag).toBe(server.body.flags[FLAG].variant);

    const stored = await eventually(async () => {
      const rows = await sql<{ event: string; distinct_id: string; properties: Record<string, any> }>(
        api.orm,
        `select event, distinct_id, properties from event where project_id = ? order by timestamp`,
        [account.projectId],
      );
      const names = new Set(rows.map((r) => r.event));
      const expected = ['$pageview', 'checkout started', '$identify', '$feature_flag_called'];
      return expected.every((n) => names.has(n)) ? rows : null;
    }).catch((error) => {
      throw new Error(`${error.message}; the page saw: ${problems.join('; ') || 'no failure'}`);
    });
    expect(stored.find((r) => r.event === '$identify')!.distinct_id).toBe(USER);
    const checkout = stored.find((r) => r.event === 'checkout started')!;
    expect(checkout.properties).toMatchObject({ cart_size: 3, $lib: 'web', $current_url: siteUrl });

    const persons = (await personsOf(api.orm, account.projectId)).filter((p) => p.distinct_ids.includes(USER));
    expect(persons).toHaveLength(1);
    expect(persons[0].is_identified).toBe(true);
    expect(persons[0].properties.email).toBe('browser@example.com');
    expect(persons[0].distinct_ids.sort()).toEqual([checkout.distinct_id, USER].sort()); // the anonymous id merged in

    // The SDK asked for its remote config and got it; nothing failed and nothing logged an error.
    expect(problems).toEqual([]);
    expect(apiAnswers).toContain(`200 /array/${account.projectToken}/config.js`);
    await page.close();
  }, 60_000);
});
