// Which client address the guessing throttles count against: with TRUST_PROXY=N the address the
// N-th trusted proxy from the right saw, never what the client wrote into X-Forwarded-For itself.
// Observed through the metrics token's guessing throttle (429 after FAILURES wrong tokens from one
// address): rotating a client-written value must not open a fresh budget.
import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, startApi, uniqueRedisPrefix, type TestApi } from '../../helpers.ts';

const TOKEN = 'client-address-metrics-token';
const FAILURES = 3;
const apis: TestApi[] = [];

async function apiTrusting(hops: number): Promise<TestApi> {
  const api = await startApi((config) => {
    config.trustProxy = hops;
    config.metricsToken = TOKEN;
    config.opsAuthFailuresPerMinute = FAILURES;
    config.redisPrefix = uniqueRedisPrefix();
  });
  apis.push(api);
  // Counted in Redis from the first guess on (it fails fast while still connecting).
  await eventually(async () => api.redis.status === 'ready' || null);
  return api;
}

let direct: TestApi;
let oneProxy: TestApi;
let twoProxies: TestApi;
beforeAll(async () => {
  [direct, oneProxy, twoProxies] = await Promise.all([apiTrusting(0), apiTrusting(1), apiTrusting(2)]);
});
afterAll(async () => {
  await Promise.all(apis.map((api) => api.close()));
});

/** GET /metrics with a wrong token and the given X-Forwarded-For header lines (each sent as its own line). */
function guess(api: TestApi, forwardedFor: string[]): Promise<number> {
  const { hostname, port } = new URL(api.baseUrl);
  return new Promise((resolve, reject) => {
    const headers: Record<string, string | string[]> = { authorization: `Bearer wrong-${Math.random()}` };
    if (forwardedFor.length) headers['x-forwarded-for'] = forwardedFor;
    const req = request({ hostname, port, path: '/metrics', method: 'GET', headers }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode!));
    });
    req.on('error', reject);
    req.end();
  });
}

/** Statuses of FAILURES + 2 guesses, one after another, each with the header lines `forwardedFor(i)`. */
async function guesses(api: TestApi, forwardedFor: (i: number) => string[]): Promise<number[]> {
  const statuses: number[] = [];
  for (let i = 0; i < FAILURES + 2; i++) statuses.push(await guess(api, forwardedFor(i)));
  return statuses;
}

const THROTTLED = [...Array(FAILURES).fill(401), 429, 429];
let octet = 0;
/** An address no other test uses, so every test starts with a fresh budget. */
const fresh = () => `198.51.100.${++octet}`;

describe('client address behind TRUST_PROXY=1', () => {
  it('is the rightmost X-Forwarded-For entry: rotating the leftmost values gets 429 all the same', async () => {
    const seen = fresh();
    expect(await guesses(oneProxy, (i) => [`10.1.0.${i}, ${seen}`])).toEqual(THROTTLED);
    // Another address the proxy saw has its own budget.
    expect(await guess(oneProxy, [`10.1.0.1, ${fresh()}`])).toBe(401);
  });

  it('reads several X-Forwarded-For header lines as one list (the client may send its own line first)', async () => {
    const seen = fresh();
    expect(await guesses(oneProxy, (i) => [`10.2.0.${i}`, `10.3.0.${i}, ${seen}`])).toEqual(THROTTLED);
    // HAProxy adds its own line rather than extending the client's.
    const other = fresh();
    expect(await guesses(oneProxy, (i) => [`spoof-${i}, 10.4.0.${i}`, other])).toEqual(THROTTLED);
  });

  it('does not count garbage as an address: it falls back to the address the connection came from', async () => {
    // The hop the proxy would have written is junk (a proxy that does not append, or a client
    // talking to the API directly): every such request counts against the socket's address.
    const junk = (i: number) => [`not-an-address-${i}`, `${'9'.repeat(i + 3)}.1.1.1`, `, , ${'x'.repeat(i * 50)}`];
    const statuses = await guesses(oneProxy, (i) => [junk(i)[i % 3]]);
    expect(statuses).toEqual(THROTTLED);
    // No header at all: the socket's address, the same budget, already used up.
    expect(await guess(oneProxy, [])).toBe(429);
  });
});

describe('client address behind TRUST_PROXY=2', () => {
  it('is the second entry from the right, whatever the client wrote before it', async () => {
    const seen = fresh();
    expect(await guesses(twoProxies, (i) => [`10.5.0.${i}, ${seen}, 10.9.9.9`])).toEqual(THROTTLED);
  });

  it('with fewer entries than hops is the leftmost, as written by the nearest proxy', async () => {
    const seen = fresh();
    expect(await guesses(twoProxies, () => [seen])).toEqual(THROTTLED);
    expect(await guess(twoProxies, [`${fresh()}`])).toBe(401);
  });
});

describe('client address without TRUST_PROXY', () => {
  it('is the socket address: X-Forwarded-For is ignored', async () => {
    expect(await guesses(direct, (i) => [`${fresh()}, 10.6.0.${i}`])).toEqual(THROTTLED);
  });
});
