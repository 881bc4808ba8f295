import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, createAccount, createKey, startApi, type TestAccount, type TestApi } from '../../helpers.ts';

let api: TestApi;
let account: TestAccount;
// A fixed clock, five seconds into a minute: no window boundary can fall inside a test.
let now = Date.UTC(2026, 0, 1, 12, 0, 5);

beforeAll(async () => {
  api = await startApi(
    (config) => {
      config.rateLimit = { enabled: true, perMinute: 3, perHour: 100 };
      config.redisPrefix = `throttle-${Math.random().toString(36).slice(2)}`; // counters of this file only
    },
    { clock: () => now },
  );
  account = await createAccount(api.orm);
});
afterAll(() => api.close());

describe('rate limiting of personal API keys', () => {
  it('answers 429 throttled_error with Retry-After once a key passes its per-minute limit', async () => {
    const path = `/api/projects/${account.projectId}/`;
    const statuses: number[] = [];
    let last: Awaited<ReturnType<typeof call>> | undefined;
    for (let i = 0; i < 5; i++) {
      last = await call(api.baseUrl, 'GET', path, { key: account.apiKey });
      statuses.push(last.status);
    }
    expect(statuses).toEqual([200, 200, 200, 429, 429]);
    const throttled = last!;
    expect(throttled.headers.get('retry-after')).toBe('55');
    expect(throttled.body.type).toBe('throttled_error');
    expect(throttled.body.code).toBe('throttled');
    expect(throttled.body.detail).toMatch(/^Request was throttled\. Expected available in \d+ seconds?\.$/);
    const retryAfter = Number(throttled.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(60);
    // The 429 tells the same budget as a success does: the limit passed, none left, when it resets.
    expect(throttled.headers.get('x-ratelimit-limit')).toBe('3');
    expect(throttled.headers.get('x-ratelimit-remaining')).toBe('0');
    expect(throttled.headers.get('x-ratelimit-reset')).toBe(String(retryAfter));
  });

  it('counts per key: another key of the same user is not throttled, and sees its budget in headers', async () => {
    const fresh = await createKey(api.orm, account.userId);
    const res = await call(api.baseUrl, 'GET', `/api/projects/${account.projectId}/`, { key: fresh });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-ratelimit-limit')).toBe('3');
    expect(res.headers.get('x-ratelimit-remaining')).toBe('2');
    expect(res.headers.get('x-ratelimit-reset')).toBe('55');
  });

  it('opens a new window at the next minute', async () => {
    const path = `/api/projects/${account.projectId}/`;
    expect((await call(api.baseUrl, 'GET', path, { key: account.apiKey })).status).toBe(429);
    now += 60_000;
    const res = await call(api.baseUrl, 'GET', path, { key: account.apiKey });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-ratelimit-remaining')).toBe('2');
  });
});
