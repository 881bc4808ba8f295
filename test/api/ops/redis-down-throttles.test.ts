// With Redis unreachable, the guessing throttles (dashboard password, metrics token) and the API's
// rate limit count in the process instead of letting every request through.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, createAccount, startApi, type TestAccount, type TestApi } from '../../helpers.ts';
import { freePort } from '../../services.ts';

const FAILURES = 3;
let api: TestApi;
let account: TestAccount;

beforeAll(async () => {
  const closedPort = await freePort();
  api = await startApi((config) => {
    config.redisUrl = `redis://127.0.0.1:${closedPort}`;
    config.adminPassword = 'redis-down-password';
    config.metricsToken = 'redis-down-metrics-token';
    config.opsAuthFailuresPerMinute = FAILURES;
    config.rateLimit = { enabled: true, perMinute: 4, perHour: 100 };
  });
  account = await createAccount(api.orm);
});
afterAll(() => api.close());

const basic = (credential: string) => `Basic ${Buffer.from(credential).toString('base64')}`;
const statuses = async (count: number, send: (i: number) => Promise<{ status: number }>) => {
  const seen: number[] = [];
  for (let i = 0; i < count; i++) seen.push((await send(i)).status);
  return seen;
};

describe('with Redis unreachable', () => {
  it('Redis really is away', async () => {
    await expect(api.redis.ping()).rejects.toThrow();
  });

  it('still throttles dashboard password guessing', async () => {
    const tries = await statuses(30, (i) =>
      call(api.baseUrl, 'GET', '/admin/queues', { headers: { authorization: basic(`admin:guess-${i}`) } }),
    );
    expect(tries).toEqual([...Array(FAILURES).fill(401), ...Array(30 - FAILURES).fill(429)]);
  });

  it('still throttles metrics token guessing', async () => {
    const tries = await statuses(30, (i) =>
      call(api.baseUrl, 'GET', '/metrics', { headers: { authorization: `Bearer guess-${i}` } }),
    );
    expect(tries).toEqual([...Array(FAILURES).fill(401), ...Array(30 - FAILURES).fill(429)]);
  });

  it('still rate limits a personal API key', async () => {
    const path = `/api/projects/${account.projectId}/`;
    const answers = await Promise.all(
      [0, 1, 2, 3, 4, 5].map(() => call(api.baseUrl, 'GET', path, { key: account.apiKey })),
    );
    expect(answers.map((a) => a.status).sort()).toEqual([200, 200, 200, 200, 429, 429]);
    const throttled = answers.find((a) => a.status === 429)!;
    expect(throttled.body).toMatchObject({ type: 'throttled_error', code: 'throttled' });
    expect(Number(throttled.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
  });
});
