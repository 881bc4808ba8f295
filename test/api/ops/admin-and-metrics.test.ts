import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  call,
  createAccount,
  eventually,
  startApi,
  uniqueRedisPrefix,
  type CallResult,
  type TestApi,
} from '../../helpers.ts';

// Client addresses come from X-Forwarded-For here, so one test can play several clients.
process.env.TRUST_PROXY = '1';

const METRICS_TOKEN = 'metrics-token-for-tests';
const FAILURES_PER_MINUTE = 3;

const FAILURES_PER_HOUR = 2 * FAILURES_PER_MINUTE;

let api: TestApi;
let noDashboard: TestApi;
/** An install whose global limit is low enough to reach: FAILURES_PER_HOUR wrong guesses of all clients. */
let smallGlobal: TestApi;

beforeAll(async () => {
  const prefix = uniqueRedisPrefix();
  api = await startApi((config) => {
    config.adminPassword = 's3cret';
    config.metricsToken = METRICS_TOKEN;
    config.opsAuthFailuresPerMinute = FAILURES_PER_MINUTE;
    config.redisPrefix = prefix;
  });
  noDashboard = await startApi((config) => {
    config.redisPrefix = uniqueRedisPrefix();
  });
  smallGlobal = await startApi((config) => {
    config.adminPassword = 's3cret';
    config.adminWritePassword = 'wr1te';
    config.metricsToken = METRICS_TOKEN;
    config.opsAuthFailuresPerMinute = FAILURES_PER_MINUTE;
    config.opsAuthFailuresPerHour = FAILURES_PER_HOUR;
    config.redisPrefix = uniqueRedisPrefix();
  });
  // Counted in Redis from the first guess on (it fails fast while still connecting).
  await eventually(async () => [api, smallGlobal].every((a) => a.redis.status === 'ready') || null);
});
afterAll(async () => {
  await api.close();
  await noDashboard.close();
  await smallGlobal.close();
});

const basic = (credential: string) => `Basic ${Buffer.from(credential).toString('base64')}`;
const from = (client: string, authorization?: string, cookie?: string) => ({
  headers: { 'x-forwarded-for': client, ...(authorization ? { authorization } : {}), ...(cookie ? { cookie } : {}) },
});
const admin = (client: string, authorization?: string, path = '/admin/queues', cookie?: string, on = api) =>
  call(on.baseUrl, 'GET', path, from(client, authorization, cookie));
/** The proof of a sign-in a browser keeps after a right password: the `name=value` of its cookie. */
const proofOf = (res: CallResult) => {
  const cookie = res.headers.get('set-cookie') ?? '';
  expect(cookie).toMatch(/^ops_proof=[^;]+;.*Path=\/admin;.*HttpOnly/i);
  expect(cookie).toMatch(/SameSite=Strict/i);
  return cookie.split(';')[0];
};
const metrics = (baseUrl: string, client: string, authorization?: string) =>
  call(baseUrl, 'GET', '/metrics', from(client, authorization));

function expectThrottled(res: CallResult) {
  expect(res.status, res.text.slice(0, 200)).toBe(429);
  expect(res.body).toMatchObject({ type: 'throttled_error', code: 'throttled', attr: null });
  const retryAfter = Number(res.headers.get('retry-after'));
  expect(retryAfter).toBeGreaterThanOrEqual(1);
  expect(retryAfter).toBeLessThanOrEqual(60);
  expect(res.headers.get('x-ratelimit-limit')).toBe(String(FAILURES_PER_MINUTE));
  expect(res.headers.get('x-ratelimit-remaining')).toBe('0');
}

describe('queue dashboard', () => {
  it('requires the admin credential', async () => {
    const anonymous = await admin('10.0.0.1');
    expect(anonymous.status).toBe(401);
    expect(anonymous.headers.get('www-authenticate')).toContain('Basic');
    const wrong = await admin('10.0.0.1', basic('admin:nope'));
    expect(wrong.status).toBe(401);
    const ok = await admin('10.0.0.1', basic('admin:s3cret'));
    expect(ok.status).toBe(200);
    expect(ok.text).toContain('<html');
    const queues = await admin('10.0.0.1', basic('admin:s3cret'), '/admin/queues/api/queues');
    const names = queues.body.queues.map((q: any) => q.name).sort();
    expect(names).toEqual(['deletions', 'experiment-results', 'maintenance', 'webhooks']);
  });

  it('answers 429 after a few wrong passwords from one address, even to the right one, and only there', async () => {
    const guesser = '10.0.0.2';
    for (let i = 0; i < FAILURES_PER_MINUTE; i++) {
      expect((await admin(guesser, basic(`admin:guess-${i}`))).status).toBe(401);
    }
    expectThrottled(await admin(guesser, basic('admin:guess-more')));
    // The right password is not told apart from a wrong one while throttled: no oracle for the guesser.
    expectThrottled(await admin(guesser, basic('admin:s3cret')));
    // Requests without credentials are no guesses and are not counted; another address is not affected.
    expect((await admin('10.0.0.3')).status).toBe(401);
    expect((await admin('10.0.0.3', basic('admin:s3cret'))).status).toBe(200);
  });

  it('lets a browser that signed in before in while another client at its address guesses, concurrently', async () => {
    const shared = '10.0.0.20';
    const proof = proofOf(await admin(shared, basic('admin:s3cret')));
    const attacker = Array.from({ length: 4 * FAILURES_PER_MINUTE }, (_, i) =>
      admin(shared, basic(`admin:guess-${i}`)),
    );
    const user = Array.from({ length: 4 * FAILURES_PER_MINUTE }, () =>
      admin(shared, basic('admin:s3cret'), '/admin/queues/api/queues', proof),
    );
    const [guesses, pages] = await Promise.all([Promise.all(attacker), Promise.all(user)]);
    expect(pages.map((r) => r.status)).toEqual(pages.map(() => 200));
    const guessed = guesses.map((r) => r.status).sort();
    expect(guessed).toEqual([...Array(FAILURES_PER_MINUTE).fill(401), ...Array(3 * FAILURES_PER_MINUTE).fill(429)]);
    // Without the proof the right password is still answered 429 there (it would otherwise be an oracle)...
    expectThrottled(await admin(shared, basic('admin:s3cret')));
    // ...and a forged or altered proof is no proof.
    const [name, value] = proof.split('=');
    const forged = `${name}=${value.slice(0, -4)}AAAA`;
    expectThrottled(await admin(shared, basic('admin:s3cret'), '/admin/queues', forged));
    expectThrottled(await admin(shared, basic('admin:s3cret'), '/admin/queues', `${name}=9999999999.AAAA`));
    // The proof does not let its holder guess more: wrong passwords with it are throttled on their own.
    const withProof = await Promise.all(
      Array.from({ length: FAILURES_PER_MINUTE + 1 }, (_, i) =>
        admin(shared, basic(`admin:other-${i}`), '/admin/queues', proof),
      ),
    );
    expect(withProof.map((r) => r.status).sort()).toEqual([...Array(FAILURES_PER_MINUTE).fill(401), 429]);
  });

  it('counts guesses per address and user name: guessing another user name does not lock out admin', async () => {
    const shared = '10.0.0.21';
    for (let i = 0; i < FAILURES_PER_MINUTE; i++)
      expect((await admin(shared, basic(`root:guess-${i}`))).status).toBe(401);
    expectThrottled(await admin(shared, basic('root:guess-more')));
    expect((await admin(shared, basic('admin:s3cret'))).status).toBe(200);
  });

  it('issues a sign-in proof once per browser for either password, and none that outlives a password change', async () => {
    for (const credential of ['admin:s3cret', 'admin:wr1te']) {
      const proof = proofOf(await admin('10.0.4.1', basic(credential), '/admin/queues', undefined, smallGlobal));
      const again = await admin('10.0.4.1', basic(credential), '/admin/queues', proof, smallGlobal);
      expect(again.status).toBe(200);
      expect(again.headers.get('set-cookie'), 'a valid proof is kept').toBeNull();
    }
    // `api` has no write password: a proof of the write password (the same user) is no proof there.
    const writeProof = proofOf(await admin('10.0.4.1', basic('admin:wr1te'), '/admin/queues', undefined, smallGlobal));
    const renewed = await admin('10.0.4.1', basic('admin:s3cret'), '/admin/queues', writeProof);
    expect(renewed.status).toBe(200);
    expect(proofOf(renewed)).not.toBe(writeProof);
  });

  it('stops all guessing past the global limit, but not a browser that signed in before', async () => {
    const proof = proofOf(await admin('10.0.3.1', basic('admin:s3cret'), '/admin/queues', undefined, smallGlobal));
    // Two addresses, each under its own limit, use up the install's budget together.
    for (const client of ['10.0.3.2', '10.0.3.3'])
      for (let i = 0; i < FAILURES_PER_MINUTE; i++)
        expect((await admin(client, basic(`admin:guess-${i}`), '/admin/queues', undefined, smallGlobal)).status).toBe(
          401,
        );
    const fresh = await admin('10.0.3.4', basic('admin:guess'), '/admin/queues', undefined, smallGlobal);
    expect(fresh.status).toBe(429);
    expect(Number(fresh.headers.get('retry-after'))).toBeGreaterThan(60);
    expect(fresh.headers.get('x-ratelimit-limit')).toBe(String(FAILURES_PER_HOUR));
    const right = await admin('10.0.3.4', basic('admin:s3cret'), '/admin/queues', undefined, smallGlobal);
    expect(right.status).toBe(429);
    expect((await admin('10.0.3.1', basic('admin:s3cret'), '/admin/queues', proof, smallGlobal)).status).toBe(200);
    // The metrics token has a budget of its own.
    expect((await metrics(smallGlobal.baseUrl, '10.0.3.4', `Bearer ${METRICS_TOKEN}`)).status).toBe(200);
  });

  it('lets many requests with the right credential through (a dashboard page loads many at once)', async () => {
    const client = '10.0.0.4';
    const page = () => admin(client, basic('admin:s3cret'), '/admin/queues/api/queues');
    const results = await Promise.all(Array.from({ length: 3 * FAILURES_PER_MINUTE }, page));
    expect(results.map((r) => r.status)).toEqual(results.map(() => 200));
  });

  it('is not mounted without ADMIN_PASSWORD', async () => {
    expect((await fetch(`${noDashboard.baseUrl}/admin/queues`)).status).toBe(404);
  });
});

describe('GET /metrics', () => {
  it('exposes request durations, queue job counts per state and deletion requests by status to the token', async () => {
    const account = await createAccount(api.orm);
    await call(api.baseUrl, 'GET', `/api/projects/${account.projectId}/persons/`, { key: account.apiKey });
    await api.deps.queues.deletions.add('reconcile', {}, { delay: 60_000 });
    const res = await metrics(api.baseUrl, '10.0.1.1', `Bearer ${METRICS_TOKEN}`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toContain('text/plain');
    const text = res.text;
    expect(text).toMatch(
      /http_request_duration_seconds_count\{method="GET",route="\/api\/projects\/:project_id\/persons",status="200"\} \d+/,
    );
    // Queue and deletion figures are the install's, on /metrics/global (metrics.test.ts).
    const bearer = from('10.0.1.1', `Bearer ${METRICS_TOKEN}`);
    const global = (await call(api.baseUrl, 'GET', '/metrics/global', bearer)).text;
    expect(global).toMatch(/bullmq_jobs\{queue="deletions",state="delayed"\} 1/);
    expect(global).toMatch(/bullmq_jobs\{queue="experiment-results",state="waiting"\} 0/);
    expect(global.match(/^# TYPE bullmq_jobs gauge$/gm)).toHaveLength(1);
    expect(global).toMatch(/deletion_requests\{status="pending"\} \d+/);
  });

  it('answers 401 with PostHog error body without the token or with a wrong one', async () => {
    const anonymous = await metrics(api.baseUrl, '10.0.1.2');
    expect(anonymous.status).toBe(401);
    expect(anonymous.body).toEqual({
      type: 'authentication_error',
      code: 'not_authenticated',
      detail: 'Authentication credentials were not provided.',
      attr: null,
    });
    expect(anonymous.headers.get('www-authenticate')).toBe('Bearer');
    const wrong = await metrics(api.baseUrl, '10.0.1.2', 'Bearer not-the-token');
    expect(wrong.status).toBe(401);
    expect(wrong.body).toMatchObject({ type: 'authentication_error', code: 'authentication_failed', attr: null });
    expect(wrong.text).not.toContain('http_request_duration_seconds');
  });

  it('throttles token guessing per address like the dashboard', async () => {
    const guesser = '10.0.1.3';
    for (let i = 0; i < FAILURES_PER_MINUTE; i++) {
      expect((await metrics(api.baseUrl, guesser, `Bearer guess-${i}`)).status).toBe(401);
    }
    expectThrottled(await metrics(api.baseUrl, guesser, `Bearer ${METRICS_TOKEN}`));
    expect((await metrics(api.baseUrl, '10.0.1.4', `Bearer ${METRICS_TOKEN}`)).status).toBe(200);
  });

  it('is not served at all without METRICS_TOKEN: 404 with PostHog error body, whatever is sent', async () => {
    for (const authorization of [undefined, 'Bearer ', `Bearer ${METRICS_TOKEN}`]) {
      const res = await metrics(noDashboard.baseUrl, '10.0.1.5', authorization);
      expect(res.status).toBe(404);
      expect(res.body).toEqual({ type: 'invalid_request', code: 'not_found', detail: 'Not found.', attr: null });
    }
  });
});
