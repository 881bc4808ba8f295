// Decompression bombs sent to a real API process (node api/main.ts), with no credentials: each is
// refused with 413 while the process keeps answering /_health, and the process is alive after.
// What /_health's answering protects is an event loop that never stops for seconds: that is measured
// by the API itself (monitorEventLoopDelay, through /metrics), not by a probe's round trip, which on a
// busy machine also counts the time the client and the server wait for a core.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventLoopDelayMaxMs } from './barrage.ts';
import { gzipBomb, gzipBombHidingSize, lz64Bomb } from './bombs.ts';
import { type ServiceProcess, startApiProcess } from '../../services.ts';

const METRICS_TOKEN = 'decompression-bombs';
/** A bomb must never stop the event loop for seconds; on a loaded 2-core machine a few hundred ms happen. */
const EVENT_LOOP_DELAY_MS = 1000;

let api: ServiceProcess & { baseUrl: string };
let baseUrl: string;

beforeAll(async () => {
  // A small heap, as a container would give it: an unbounded decoder dies quickly instead of
  // swapping the shared machine.
  api = await startApiProcess({
    NODE_OPTIONS: '--max-old-space-size=384',
    LOG_LEVEL: 'silent',
    RATE_LIMIT_ENABLED: '0',
    METRICS_TOKEN,
  });
  baseUrl = api.baseUrl;
});
afterAll(async () => {
  await api?.stop();
});

/**
 * Sends `request` while probing /_health every 20 ms; returns the answer, its time, the slowest probe
 * and the longest event-loop delay the API saw meanwhile.
 */
async function whileProbingHealth(request: () => Promise<Response>) {
  await eventLoopDelayMaxMs(baseUrl, METRICS_TOKEN); // resets the API's figure
  let done = false;
  let slowestProbeMs = 0;
  let probes = 0;
  const prober = (async () => {
    while (!done) {
      const started = performance.now();
      const ok = await fetch(`${baseUrl}/_health`, { signal: AbortSignal.timeout(5000) }).then(
        (r) => r.ok,
        () => false,
      );
      const ms = performance.now() - started;
      slowestProbeMs = Math.max(slowestProbeMs, ok ? ms : Infinity);
      probes++;
      await new Promise((r) => setTimeout(r, 20));
    }
  })();
  const started = performance.now();
  let response: Response | null = null;
  let body: any = null;
  try {
    response = await request();
    body = await response.json();
  } catch {
    // a killed or frozen process: asserted below
  }
  const ms = performance.now() - started;
  done = true;
  await prober;
  const eventLoopDelayMs = await eventLoopDelayMaxMs(baseUrl, METRICS_TOKEN);
  return { status: response?.status ?? 0, body, ms, slowestProbeMs, probes, eventLoopDelayMs };
}

const post =
  (path: string, body: string | Buffer, headers: Record<string, string> = {}) =>
  () =>
    fetch(baseUrl + path, {
      method: 'POST',
      body: body as BodyInit,
      headers: { 'content-type': 'text/plain', ...headers },
      signal: AbortSignal.timeout(15_000),
    });

describe('decompression bombs', () => {
  const cases: [string, () => () => Promise<Response>][] = [
    ['261 KB lz64 to /e (2 MB limit)', () => post('/e/?compression=lz64', lz64Bomb(261 * 1024))],
    ['70 KB lz64 to /e', () => post('/e/?compression=lz64', lz64Bomb(70 * 1024))],
    ['261 KB lz64 to /batch (20 MB limit)', () => post('/batch/?compression=lz64', lz64Bomb(261 * 1024))],
    [
      'lz64 in a form field',
      () =>
        post('/e/', `compression=lz64&data=${encodeURIComponent(lz64Bomb(261 * 1024))}`, {
          'content-type': 'application/x-www-form-urlencoded',
        }),
    ],
    [
      'gzip of 64 MB to /batch (20 MB limit)',
      () => post('/batch/', gzipBomb(64 * 1024 * 1024), { 'content-encoding': 'gzip' }),
    ],
    ['gzip sniffed, 64 MB to /i/v0/e', () => post('/i/v0/e/', gzipBomb(64 * 1024 * 1024))],
    [
      'gzip of 64 MB hiding its size, to /batch (decoded up to the limit)',
      () => post('/batch/', gzipBombHidingSize(64 * 1024 * 1024), { 'content-encoding': 'gzip' }),
    ],
    ['lz64 to /flags', () => post('/flags/?v=2&compression=lz64', lz64Bomb(261 * 1024))],
  ];
  it.each(cases)('%s: 413 quickly, /_health keeps answering, the process lives', async (_name, request) => {
    const result = await whileProbingHealth(request());
    expect(result.status).toBe(413);
    expect(result.body).toMatchObject({ type: 'invalid_request', code: 'payload_too_large', attr: null });
    expect(result.ms).toBeLessThan(3000);
    expect(result.probes).toBeGreaterThan(0);
    expect(result.slowestProbeMs).toBeLessThan(Number.POSITIVE_INFINITY); // every probe answered
    expect(result.eventLoopDelayMs).toBeLessThan(EVENT_LOOP_DELAY_MS);
    expect(api.child.exitCode).toBeNull();
    expect((await fetch(`${baseUrl}/_health`)).status).toBe(200);
  });
});
