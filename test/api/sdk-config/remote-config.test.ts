// The remote config posthog-js asks for on every page load (/array/<token>/config and config.js),
// and CORS headers on every answer of an SDK endpoint, errors included: a browser hides an
// answer without them from the SDK and logs a CORS error instead.
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import { apiWithAccount, call, createAccount } from '../../helpers.ts';

const { api, account } = await apiWithAccount();
const ORIGIN = 'https://shop.example.com';
const fromSite = { headers: { origin: ORIGIN } };

function expectSdkCors(res: { headers: Headers }, what: string) {
  expect(res.headers.get('access-control-allow-origin'), what).toBe(ORIGIN);
  expect(res.headers.get('access-control-allow-credentials'), what).toBe('true');
  expect(res.headers.get('vary') ?? '', what).toMatch(/origin/i);
}

/** Runs config.js as a browser would and returns what it left on window. */
function runConfigScript(script: string): Record<string, any> {
  const window: Record<string, any> = {};
  runInNewContext(script, { window });
  return window._POSTHOG_REMOTE_CONFIG;
}

describe('GET /array/<token>/config', () => {
  it('answers with what this service knows, in PostHog’s shape, with CORS and a cache lifetime', async () => {
    const res = await call(api.baseUrl, 'GET', `/array/${account.projectToken}/config`, fromSite);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    expect(res.headers.get('cache-control')).toMatch(/^public, max-age=\d+$/);
    expectSdkCors(res, 'config');
    expect(res.body).toEqual({
      token: account.projectToken,
      supportedCompression: ['gzip', 'gzip-js'],
      hasFeatureFlags: false,
      captureDeadClicks: false,
      capturePerformance: false,
      autocapture_opt_out: false,
      autocaptureExceptions: false,
      analytics: { endpoint: '/i/v0/e/' },
      elementsChainAsString: true,
      errorTracking: { autocaptureExceptions: false, suppressionRules: [] },
      logs: { captureConsoleLogs: false },
      sessionRecording: false,
      heatmaps: false,
      conversations: false,
      productTours: false,
      defaultIdentifiedOnly: true,
      siteApps: [],
    });
    // PostHog says `surveys: false`; posthog-js would then fetch its surveys bundle from /static/.
    expect(res.body).not.toHaveProperty('surveys');
    // The trailing-slash form answers the same.
    expect((await call(api.baseUrl, 'GET', `/array/${account.projectToken}/config/`)).body).toEqual(res.body);
  });

  it('says hasFeatureFlags once the project has an active flag (a launched experiment’s)', async () => {
    const other = await createAccount(api.orm);
    const hasFlags = async () =>
      (await call(api.baseUrl, 'GET', `/array/${other.projectToken}/config`)).body.hasFeatureFlags;
    const P = `/api/projects/${other.projectId}/experiments`;
    const draft = { name: 'Hint', feature_flag_key: 'hint' };
    const exp = (await call(api.baseUrl, 'POST', `${P}/`, { key: other.apiKey, body: draft })).body;
    expect(await hasFlags()).toBe(false); // a draft's flag is inactive
    const launch = { start_date: new Date().toISOString() };
    expect((await call(api.baseUrl, 'PATCH', `${P}/${exp.id}/`, { key: other.apiKey, body: launch })).status).toBe(200);
    expect(await hasFlags()).toBe(true);
  });

  it('answers 404 with PostHog’s error body and CORS for an unknown token', async () => {
    for (const token of ['phc_unknown', 'x'.repeat(300), '%00', 'phc_%27%22']) {
      const res = await call(api.baseUrl, 'GET', `/array/${token}/config`, fromSite);
      expect(res.status, token).toBe(404);
      expect(res.body).toEqual({ type: 'invalid_request', code: 'not_found', detail: 'Not found.', attr: null });
      expectSdkCors(res, token);
    }
  });
});

describe('GET /array/<token>/config.js', () => {
  it('is a script that sets the same config on window._POSTHOG_REMOTE_CONFIG[token]', async () => {
    const res = await call(api.baseUrl, 'GET', `/array/${account.projectToken}/config.js`, fromSite);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^application\/javascript/);
    expect(res.headers.get('cache-control')).toMatch(/^public, max-age=\d+$/);
    expectSdkCors(res, 'config.js');
    const json = (await call(api.baseUrl, 'GET', `/array/${account.projectToken}/config`)).body;
    const { siteApps, ...config } = json;
    const remote = runConfigScript(res.text);
    expect(Object.keys(remote)).toEqual([account.projectToken]);
    expect(remote[account.projectToken]).toEqual({ config, siteApps });
    // Loaded twice (two snippets on one page), the second keeps what the first set for other tokens.
    const window: Record<string, any> = { _POSTHOG_REMOTE_CONFIG: { phc_other: { config: {} } } };
    runInNewContext(res.text, { window });
    expect(Object.keys(window._POSTHOG_REMOTE_CONFIG).sort()).toEqual([account.projectToken, 'phc_other'].sort());
  });

  it('answers 404 with CORS for an unknown token', async () => {
    const res = await call(api.baseUrl, 'GET', '/array/phc_unknown/config.js', fromSite);
    expect(res.status).toBe(404);
    expectSdkCors(res, 'config.js 404');
  });
});

describe('CORS on every answer of an SDK endpoint', () => {
  const token = () => account.projectToken;
  const cases: [string, string, string | undefined][] = [
    ['OPTIONS', `/array/TOKEN/config`, undefined],
    ['OPTIONS', `/array/TOKEN/config.js`, undefined],
    ['PUT', '/e', undefined], // 405 from the router
    ['DELETE', '/batch/', undefined],
    ['PATCH', '/i/v0/e/', undefined],
    ['PUT', '/flags/', undefined],
    ['GET', '/decide/', undefined],
    ['POST', '/array/TOKEN/config', undefined],
    ['GET', '/array/TOKEN/nothing-here', undefined], // 404 under an SDK prefix
    ['POST', '/e/', '{"token": "phc_nope", "event": "x", "distinct_id": "a"}'],
    ['POST', '/flags/?v=2', '{broken'],
  ];
  it.each(cases)('%s %s', async (method, path, body) => {
    const res = await call(api.baseUrl, method, path.replace('TOKEN', token()), { ...fromSite, body });
    if (method === 'OPTIONS') expect(res.status).toBe(204);
    else expect(res.status).toBeGreaterThanOrEqual(400);
    expectSdkCors(res, `${method} ${path}`);
    if (res.status >= 400) expect(Object.keys(res.body).sort()).toEqual(['attr', 'code', 'detail', 'type']);
  });

  it('keeps the management API without SDK CORS', async () => {
    const res = await call(api.baseUrl, 'GET', '/api/projects/', fromSite);
    expect(res.status).toBe(401);
    expect(res.headers.get('access-control-allow-origin')).toBeNull();
  });
});
