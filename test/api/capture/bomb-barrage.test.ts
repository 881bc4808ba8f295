// Many decompression bombs at once, with no credentials, against a real API process: the decoding in
// flight across requests is bounded (peak RSS), memory is given back after, the event loop keeps
// turning (the API's own monitorEventLoopDelay, read through /metrics), and valid SDK batches sent
// meanwhile answer 200. Bombs answer 413 (decoded past their limit) or 503 with Retry-After (the
// process's decode budget is in use). Counts are moderate so that the bounds hold on a busy 2-core
// machine; bench/decode-bombs.ts measures 320 lz64 and 160 gzip bombs.
import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { initOrm } from '../../../shared/platform/db/orm.ts';
import { createAccount, type TestAccount } from '../../helpers.ts';
import { startApiProcess } from '../../services.ts';
import { barrage, memoryMb, validBatch, type BarrageResult, type Shot } from './barrage.ts';
import { gzipBombHidingSize, lz64Bomb } from './bombs.ts';

const METRICS_TOKEN = 'bomb-barrage';
/** The targets: under 1 GB at peak, within 150 MB of idle 30 s after; no stall of seconds. */
const PEAK_RSS_MB = 1024;
const GIVEN_BACK_MB = 150;
const EVENT_LOOP_DELAY_MS = 1000;

let api: Awaited<ReturnType<typeof startApiProcess>> | undefined;
let orm: MikroORM;
let account: TestAccount;

beforeAll(async () => {
  orm = await initOrm(process.env.DATABASE_URL!);
  account = await createAccount(orm);
});
// A fresh API process for each barrage, as the issue measured: one's memory is not the next one's.
beforeEach(async () => {
  api = await startApiProcess({ METRICS_TOKEN, RATE_LIMIT_ENABLED: 'false' });
});
afterEach(async () => {
  await api?.stop();
});
afterAll(async () => {
  await orm?.close();
});

const countBy = (values: number[]) => {
  const counts: Record<number, number> = {};
  for (const value of values) counts[value] = (counts[value] ?? 0) + 1;
  return counts;
};

async function checkBarrage(bombs: Shot[]): Promise<BarrageResult> {
  if (!api) throw new Error('no API process');
  const pid = api.child.pid!;
  const idle = memoryMb(pid);
  const result = await barrage({
    baseUrl: api.baseUrl,
    pid,
    metricsToken: METRICS_TOKEN,
    bombs,
    valid: validBatch(account.projectToken),
  });
  console.log(
    `${bombs.length} bombs: ${JSON.stringify(result.bombStatuses)} in ${result.ms.toFixed(0)} ms; RSS idle ${idle.toFixed(0)} MB, ` +
      `peak ${result.peakRssMb.toFixed(0)} MB; event-loop delay max ${result.eventLoopDelayMaxMs.toFixed(0)} ms; ` +
      `/_health max ${Math.max(...result.healthMs).toFixed(0)} ms; valid batches ${JSON.stringify(countBy(result.validStatuses))}`,
  );
  expect(Object.keys(result.bombStatuses).every((status) => status === '413' || status === '503')).toBe(true);
  if (result.bombAnswers[413])
    expect(result.bombAnswers[413].body).toMatchObject({ type: 'invalid_request', code: 'payload_too_large' });
  if (result.bombAnswers[503]) {
    expect(result.bombAnswers[503].body).toMatchObject({
      type: 'server_error',
      code: 'service_unavailable',
      attr: null,
    });
    expect(Number(result.bombAnswers[503].retryAfter)).toBeGreaterThan(0);
  }
  expect(result.validStatuses.length).toBeGreaterThan(0);
  expect(result.validStatuses.every((status) => status === 200)).toBe(true);
  expect(result.peakRssMb).toBeLessThan(PEAK_RSS_MB);
  expect(result.eventLoopDelayMaxMs).toBeLessThan(EVENT_LOOP_DELAY_MS);
  expect(result.healthMs.length).toBeGreaterThan(0);
  expect(result.healthMs.every(Number.isFinite)).toBe(true); // every /_health probe answered
  // Memory given back: the resident size comes back near what it was before, within 30 s.
  let after = memoryMb(pid);
  for (const deadline = Date.now() + 30_000; after >= idle + GIVEN_BACK_MB && Date.now() < deadline; ) {
    await new Promise((resolve) => setTimeout(resolve, 500));
    after = memoryMb(pid);
  }
  console.log(`RSS ${after.toFixed(0)} MB after the barrage (idle ${idle.toFixed(0)} MB)`);
  expect(after).toBeLessThan(idle + GIVEN_BACK_MB);
  expect(api.child.exitCode).toBeNull();
  return result;
}

describe('many decompression bombs at once', () => {
  it('120 lz64 bombs of 261 KB to /batch: bounded memory, given back, the loop turns, valid batches 200', async () => {
    const bomb = lz64Bomb(261 * 1024);
    await checkBarrage(Array.from({ length: 120 }, () => ({ path: '/batch/?compression=lz64', body: bomb })));
  }, 90_000);

  it('120 gzip bombs of 64 MB hiding their size to /batch: the same', async () => {
    const bomb = gzipBombHidingSize(64 * 1024 * 1024);
    await checkBarrage(
      Array.from({ length: 120 }, () => ({ path: '/batch/', body: bomb, headers: { 'content-encoding': 'gzip' } })),
    );
  }, 90_000);
});
