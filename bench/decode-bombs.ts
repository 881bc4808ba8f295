// Many decompression bombs at once, with no credentials, against a fresh API process each time:
// 320 lz64 bodies of 261 KB, then 160 gzip bodies of 64 KB (64 MB decoded), honest and then hiding
// their size in the trailer, all to /batch (20 MB limit), while a valid gzip batch goes every 100 ms and /_health is probed every 20 ms. Prints the
// API's RSS (idle, peak, 30 s after), /_health latency, the API's own longest event-loop delay and the
// answers. Counts: DECODE_BOMBS_LZ64, DECODE_BOMBS_GZIP (0 skips that kind). `npm run bench -- decode-bombs`.
import { gzipBomb, gzipBombHidingSize, lz64Bomb } from '../test/api/capture/bombs.ts';
import { barrage, memoryMb, validBatch, type Shot } from '../test/api/capture/barrage.ts';
import { benchSetup, startApiProcess } from './harness.ts';
import { percentile, progress } from './stats.ts';

const METRICS_TOKEN = 'bench-decode-bombs';
const lz64Count = Number(process.env.DECODE_BOMBS_LZ64 ?? 320);
const gzipCount = Number(process.env.DECODE_BOMBS_GZIP ?? 160);

const { orm, account, pool } = await benchSetup();
await pool.end();
await orm.close();
const valid = validBatch(account.projectToken);

async function run(name: string, bombs: Shot[]) {
  const api = await startApiProcess({ METRICS_TOKEN, REDIS_PREFIX: process.env.REDIS_PREFIX ?? 'bench' });
  const pid = api.child.pid!;
  try {
    await new Promise((r) => setTimeout(r, 2000));
    const idle = memoryMb(pid);
    progress(`${name}: ${bombs.length} bombs, idle RSS ${idle.toFixed(0)} MB`);
    const result = await barrage({ baseUrl: api.baseUrl, pid, metricsToken: METRICS_TOKEN, bombs, valid });
    let after = memoryMb(pid);
    for (let s = 1; s <= 30; s++) {
      await new Promise((r) => setTimeout(r, 1000));
      after = memoryMb(pid);
      progress(`${name}: RSS ${after.toFixed(0)} MB, ${s} s after`);
    }
    const metrics = await (
      await fetch(`${api.baseUrl}/metrics`, { headers: { authorization: `Bearer ${METRICS_TOKEN}` } })
    ).text();
    const figure = (name: string) =>
      Number(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, 'm').exec(metrics)?.[1]) / 1024 / 1024;
    const heap = `heap used ${figure('nodejs_heap_size_used_bytes').toFixed(0)} MB of ${figure('nodejs_heap_size_total_bytes').toFixed(0)}, external ${figure('nodejs_external_memory_bytes').toFixed(0)} MB`;
    const validCounts: Record<number, number> = {};
    for (const status of result.validStatuses) validCounts[status] = (validCounts[status] ?? 0) + 1;
    console.log(
      `\n${name}: ${bombs.length} bombs answered in ${(result.ms / 1000).toFixed(1)} s ${JSON.stringify(result.bombStatuses)}\n` +
        `  RSS idle ${idle.toFixed(0)} MB, peak ${result.peakRssMb.toFixed(0)} MB, 30 s after ${after.toFixed(0)} MB (+${(after - idle).toFixed(0)}; ${heap})\n` +
        `  /_health p50 ${percentile(result.healthMs, 50).toFixed(1)} ms, p99 ${percentile(result.healthMs, 99).toFixed(1)} ms, ` +
        `max ${Math.max(...result.healthMs).toFixed(1)} ms (${result.healthMs.length} probes); ` +
        `API event-loop delay max ${result.eventLoopDelayMaxMs.toFixed(0)} ms\n` +
        `  valid batches meanwhile ${JSON.stringify(validCounts)}`,
    );
  } finally {
    await api.stop();
  }
}

const lz64 = lz64Bomb(261 * 1024);
if (lz64Count > 0)
  await run(
    'lz64',
    Array.from({ length: lz64Count }, () => ({ path: '/batch/?compression=lz64', body: lz64 })),
  );
const gzipKinds = [
  ['gzip', gzipBomb(64 * 1024 * 1024)],
  ['gzip hiding its size', gzipBombHidingSize(64 * 1024 * 1024)],
] as const;
for (const [name, gzip] of gzipCount > 0 ? gzipKinds : [])
  await run(
    name,
    Array.from({ length: gzipCount }, () => ({ path: '/batch/', body: gzip, headers: { 'content-encoding': 'gzip' } })),
  );
process.exit(0);
