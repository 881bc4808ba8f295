// Ingestion throughput: gzipped /batch requests of 100 events (new and returning distinct ids, some
// $set) sent from this process to the API process, beside raw multi-row INSERTs of the same rows
// through pg into a table with the same indexes, in the same run; and the CPU each event cost the
// PostgreSQL server, the API and the sender, which says how many cores a target rate needs.
import { randomUUID } from 'node:crypto';
import { availableParallelism } from 'node:os';
import { gzipSync } from 'node:zlib';
import { benchSetup, databaseCpuMeter, loadFor, startApiProcess } from './harness.ts';
import { createAccount } from '../test/helpers.ts';
import { cpuMeter, percentile, progress } from './stats.ts';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 20);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 8);
const BATCH = 100;

const { orm, account, pool } = await benchSetup();
const api = await startApiProcess();

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

console.log(`ingestion: ${SECONDS}s, ${CONCURRENCY} concurrent senders, ${BATCH} events per gzipped /batch`);
let sent = 0;
let requests = 0;
const send = async () => {
  const body = gzipSync(
    JSON.stringify({ api_key: account.projectToken, sent_at: new Date().toISOString(), batch: batch(requests++) }),
  );
  const res = await fetch(`${api.baseUrl}/batch/`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'content-encoding': 'gzip' },
    body,
  });
  if (res.status !== 200) throw new Error(`capture answered ${res.status}: ${await res.text()}`);
  sent += BATCH;
};
// Warm-up, then ANALYZE as autovacuum would once the new project has rows (autovacuum is off on this
// machine; without it the planner keeps believing the project has no persons).
await loadFor(3, CONCURRENCY, send);
await pool.query('analyze person; analyze person_distinct_id; analyze event');
sent = 0;
const timer = setInterval(() => progress(`  sent ${sent} events`), 1000);
// PostgreSQL: the bench database's backends only, not every postgres process on the machine.
const cpuMeters = {
  postgres: await databaseCpuMeter(pool),
  api: cpuMeter(api.child.pid),
  sender: cpuMeter(process.pid),
};
const started = performance.now();
const latencies = await loadFor(SECONDS, CONCURRENCY, send);
const elapsed = (performance.now() - started) / 1000;
clearInterval(timer);
const apiRate = sent / elapsed;
const apiCpu = { postgres: await cpuMeters.postgres.stop(), api: cpuMeters.api(), sender: cpuMeters.sender() };

// Baseline: the same shape of rows, raw multi-row INSERTs through pg into the event table itself (its
// partitions and indexes, as the API writes), under a project of its own that is emptied afterwards.
const baselineProjectId = (await createAccount(orm)).projectId;
const rows = batch(0);
let inserted = 0;
const rawPostgresCpuMeter = await databaseCpuMeter(pool);
const baseStart = performance.now();
await loadFor(Math.min(10, SECONDS), 1, async () => {
  const values: unknown[] = [];
  const tuples = rows.map((r, k) => {
    values.push(
      randomUUID(),
      baselineProjectId,
      r.event,
      r.distinct_id,
      randomUUID(),
      JSON.stringify(r.properties),
      r.timestamp,
    );
    const b = k * 7;
    return `($${b + 1}, $${b + 2}, $${b + 3}, $${b + 4}, $${b + 5}, $${b + 6}, $${b + 7})`;
  });
  await pool.query(
    `insert into event (uuid, project_id, event, distinct_id, person_id, properties, timestamp) values ${tuples.join(',')}`,
    values,
  );
  inserted += rows.length;
});
const rawRate = inserted / ((performance.now() - baseStart) / 1000);
const rawPostgresCpu = await rawPostgresCpuMeter.stop();
await pool.query('delete from event where project_id = $1', [baselineProjectId]);

console.log(
  `\n  API ingestion: ${Math.round(apiRate)} events/s (p50 ${percentile(latencies, 50).toFixed(1)} ms, p99 ${percentile(latencies, 99).toFixed(1)} ms per 100-event request)`,
);
console.log(`  raw pg INSERT of the same rows (1 connection): ${Math.round(rawRate)} rows/s`);
console.log(`  ratio API / raw: ${(apiRate / rawRate).toFixed(2)}  (targets: >= 20000 events/s, >= 0.33)`);
const perEvent = (seconds: number) => ((seconds / sent) * 1e6).toFixed(0);
const cores = (seconds: number) => (seconds / elapsed).toFixed(2);
const cpuPerEvent = (apiCpu.postgres + apiCpu.api + apiCpu.sender) / sent;
console.log(
  `  CPU per event: PostgreSQL ${perEvent(apiCpu.postgres)} µs, API ${perEvent(apiCpu.api)} µs, sender ${perEvent(apiCpu.sender)} µs` +
    ` (cores busy: ${cores(apiCpu.postgres)}, ${cores(apiCpu.api)}, ${cores(apiCpu.sender)}); raw INSERT: PostgreSQL ${((rawPostgresCpu / inserted) * 1e6).toFixed(0)} µs per row`,
);
console.log(
  `  at these costs 20000 events/s needs ${(cpuPerEvent * 20000).toFixed(1)} cores; this machine has ${availableParallelism()}`,
);
await api.stop();
await pool.end();
await orm.close();
