// Ingestion throughput, like for like: gzipped /batch requests of 100 events (new and returning
// distinct ids, some $set, some $identify) from N concurrent senders to the API process, against raw
// multi-row INSERTs of the same events through pg on N connections into the event table itself (its
// partitions and indexes, as the API writes). The two run in interleaved pairs of equal windows (the
// order alternates, so a machine shared with other work weighs on both sides alike); each pair gives a
// ratio, and the median and spread of those ratios are printed, with the CPU each event cost the server,
// its PostgreSQL backends and the clients (this process).
import { randomUUID } from 'node:crypto';
import { availableParallelism, loadavg } from 'node:os';
import { gzipSync } from 'node:zlib';
import { benchSetup, closeIdleConnections, databaseCpuMeter, loadFor, postOk, startApiProcess } from './harness.ts';
import { createAccount } from '../test/helpers.ts';
import { cpuMeter, percentile } from './stats.ts';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 10);
const PAIRS = Number(process.env.BENCH_PAIRS ?? 3);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 8);
const BATCH = 100;

const { orm, account, pool } = await benchSetup();
const api = await startApiProcess();
const baselineProjectId = (await createAccount(orm)).projectId;

function batch(i: number) {
  return Array.from({ length: BATCH }, (_, j) => {
    // Half the events come from returning users (a pool of 5,000), half from new ones.
    const returning = j % 2 === 0;
    const distinctId = returning ? `returning-${(i * 31 + j) % 5000}` : `new-${i}-${j}`;
    return {
      event: j % 10 === 0 ? '$identify' : `event_${j % 20}`,
      distinct_id: distinctId,
      uuid: randomUUID(),
      timestamp: new Date().toISOString(),
      properties: {
        $lib: 'bench',
        path: `/page/${j}`,
        ...(j % 5 === 0 ? { $set: { plan: j % 3 ? 'free' : 'pro', seen: i } } : {}),
      },
    };
  });
}

// Batch numbers are shared by both sides and never repeat, so "new" distinct ids are new to the API.
let batchNumber = 0;

/** One /batch request of 100 events, as posthog-node sends it (gzipped JSON). */
const sendToApi = async () => {
  const body = gzipSync(
    JSON.stringify({ api_key: account.projectToken, sent_at: new Date().toISOString(), batch: batch(batchNumber++) }),
  );
  await postOk(`${api.baseUrl}/batch/`, body, { 'content-encoding': 'gzip' });
};

/** The same 100 events as one multi-row INSERT through pg (the pool has CONCURRENCY connections). */
const insertRaw = async () => {
  const values: unknown[] = [];
  const now = new Date();
  const tuples = batch(batchNumber++).map((r, k) => {
    values.push(randomUUID(), baselineProjectId, r.event, r.distinct_id, randomUUID(), JSON.stringify(r.properties));
    values.push(r.timestamp, now);
    const b = k * 8;
    return `($${b + 1}, $${b + 2}, $${b + 3}, $${b + 4}, $${b + 5}, $${b + 6}, $${b + 7}, $${b + 8})`;
  });
  await pool.query(
    `insert into event (uuid, project_id, event, distinct_id, person_id, properties, timestamp, created_at)
     values ${tuples.join(',')} on conflict do nothing`,
    values,
  );
};

interface Window {
  eventsPerSecond: number;
  p50: number;
  /** CPU µs per event. */
  server: number;
  postgres: number;
  clients: number;
}

async function measure(side: 'api' | 'raw'): Promise<Window> {
  if (side === 'api') closeIdleConnections(); // the API was idle during the raw window
  const serverCpu = side === 'api' ? cpuMeter(api.child.pid) : () => 0;
  const postgresCpu = await databaseCpuMeter(pool);
  const clientsCpu = process.cpuUsage();
  const started = performance.now();
  const latencies = await loadFor(SECONDS, CONCURRENCY, side === 'api' ? sendToApi : insertRaw);
  const elapsed = (performance.now() - started) / 1000;
  const events = latencies.length * BATCH;
  const clients = process.cpuUsage(clientsCpu);
  const perEvent = (seconds: number) => (seconds * 1e6) / events;
  return {
    eventsPerSecond: events / elapsed,
    p50: percentile(latencies, 50),
    server: perEvent(serverCpu()),
    postgres: perEvent(await postgresCpu.stop()),
    clients: perEvent((clients.user + clients.system) / 1e6),
  };
}

console.log(
  `ingestion: ${PAIRS} interleaved pairs of ${SECONDS}-s windows; /batch of ${BATCH} events (gzipped) from ${CONCURRENCY} senders` +
    ` vs. raw multi-row INSERT of the same events on ${CONCURRENCY} pg connections`,
);
// Warm-up of both sides, then ANALYZE as autovacuum would once the new project has rows (autovacuum
// is off on this machine; without it the planner keeps believing the project has no persons).
await loadFor(3, CONCURRENCY, sendToApi);
await loadFor(2, CONCURRENCY, insertRaw);
await pool.query('analyze person; analyze person_distinct_id; analyze event');

const loadAtStart = loadavg()[0];
const windows = { api: [] as Window[], raw: [] as Window[] };
const ratios: number[] = [];
const fmt = (n: number) => n.toFixed(0);
for (let pair = 0; pair < PAIRS; pair++) {
  const order = pair % 2 === 0 ? (['api', 'raw'] as const) : (['raw', 'api'] as const);
  const result: Partial<Record<'api' | 'raw', Window>> = {};
  for (const side of order) result[side] = await measure(side);
  const a = result.api!;
  const r = result.raw!;
  windows.api.push(a);
  windows.raw.push(r);
  ratios.push(a.eventsPerSecond / r.eventsPerSecond);
  console.log(
    `  pair ${pair + 1} (${order[0]} first): API ${fmt(a.eventsPerSecond)} events/s (p50 ${a.p50.toFixed(1)} ms per request),` +
      ` raw INSERT ${fmt(r.eventsPerSecond)} rows/s (p50 ${r.p50.toFixed(1)} ms), ratio ${ratios.at(-1)!.toFixed(2)}`,
  );
}
await pool.query('delete from event where project_id = $1', [baselineProjectId]);

const median = (xs: number[]) => {
  const s = [...xs].sort((x, y) => x - y);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const med = (side: 'api' | 'raw', key: keyof Window) => median(windows[side].map((w) => w[key]));
console.log(
  `  ratio API / raw INSERT: median ${median(ratios).toFixed(2)}, ${Math.min(...ratios).toFixed(2)}–${Math.max(...ratios).toFixed(2)} over ${PAIRS} pairs (target ≥ 0.5)`,
);
console.log(
  `  median events/s: API ${fmt(med('api', 'eventsPerSecond'))}, raw INSERT ${fmt(med('raw', 'eventsPerSecond'))};` +
    ` median p50 per 100-event request: API ${med('api', 'p50').toFixed(1)} ms, raw INSERT ${med('raw', 'p50').toFixed(1)} ms`,
);
const cpuLine = (side: 'api' | 'raw') => {
  const parts = (['server', 'postgres', 'clients'] as const).map((k) => med(side, k));
  const [server, postgres, clients] = parts;
  const total = server + postgres + clients;
  return `server ${fmt(server)}, PostgreSQL ${fmt(postgres)}, clients ${fmt(clients)} (total ${fmt(total)}; ${fmt(total * BATCH)} per request)`;
};
console.log(`  CPU µs per event (median of windows): API ${cpuLine('api')}`);
console.log(`                                        raw INSERT ${cpuLine('raw')}`);
const apiTotal = med('api', 'server') + med('api', 'postgres') + med('api', 'clients');
console.log(
  `  at the API's cost 20000 events/s needs ${((apiTotal * 20000) / 1e6).toFixed(1)} cores; this machine has ${availableParallelism()}` +
    ` (load average over 1 min: ${loadAtStart.toFixed(1)} at the first window, ${loadavg()[0].toFixed(1)} after the last)`,
);
await api.stop();
await pool.end();
await orm.close();
