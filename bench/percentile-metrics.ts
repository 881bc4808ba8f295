// Percentile metrics (issue #46: a new metric kind adds at most 1.3× to a backfill that computes a mean
// metric over the same events): the worker's backfill of one experiment's days, from the start, with a
// mean metric (revenue: sum of `amount` per person), and the same with a percentile metric over the same
// events (P90 of each person's revenue; P90 of each purchase's amount, clustered by person), run
// alternately in the same process on the PostgreSQL event store (bench/generate.ts: BENCH_EVENTS
// default 2,000,000, BENCH_PERSONS 100,000, 30 days; BENCH_REPS pairs, default 3).
import type { Job } from 'bullmq';
import type { JobData } from '../shared/platform/jobs.ts';
import type { WorkerDeps } from '../worker/deps.ts';
import { computeExperimentResults } from '../shared/experiments/index.ts';
import { logger } from '../shared/platform/logger.ts';
import { createPostgresEventStore } from '../shared/events/index.ts';
import { generateEvents } from './generate.ts';
import { benchSetup, startApiProcess, withoutEventIndexes } from './harness.ts';
import { progress, timed } from './stats.ts';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createClient, type ClickHouseClientConfigOptions } from '@clickhouse/client';
import { createChdbConnection } from 'chdb/connection';
import { backfillEvents, createClickHouseEventStore, type EventStore } from '../shared/events/index.ts';

const EVENTS = Number(process.env.BENCH_EVENTS ?? 2_000_000);
const PERSONS = Number(process.env.BENCH_PERSONS ?? 100_000);
const DAYS = 30;
const BACKFILL_DAYS = 14;
const REPS = Number(process.env.BENCH_REPS ?? 3);
const FLAG = 'bench-percentile';

const { orm, account, pool } = await benchSetup();
const pid = account.projectId;
console.log(`percentile-metrics: generating ${EVENTS} events, ${PERSONS} persons, ${DAYS} days…`);
const generated = await withoutEventIndexes(pool, () =>
  generateEvents(pool, { projectId: pid, events: EVENTS, persons: PERSONS, days: DAYS, flagKey: FLAG }),
);
console.log(`  generated in ${generated.seconds.toFixed(0)} s`);
await pool.query('vacuum analyze event');

const now = new Date();
const today = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate());
const startDate = new Date(today - (BACKFILL_DAYS - 1) * 86400_000 + 9 * 3600_000);
const source = { kind: 'EventsNode', event: 'purchase', math: 'sum', math_property: 'amount' };
const configurations = {
  mean: { kind: 'ExperimentMetric', metric_type: 'mean', source },
  'percentile per person': { kind: 'ExperimentMetric', metric_type: 'percentile', percentile: 0.9, source },
  'percentile per event': {
    kind: 'ExperimentMetric',
    metric_type: 'percentile',
    percentile: 0.9,
    percentile_unit: 'per_event',
    source,
  },
};
type Name = keyof typeof configurations;

// One experiment with the three metrics (uuids and fingerprints from the API); each run keeps one of them.
const api = await startApiProcess();
const res = await fetch(`${api.baseUrl}/api/projects/${pid}/experiments/`, {
  method: 'POST',
  headers: { authorization: `Bearer ${account.apiKey}`, 'content-type': 'application/json' },
  body: JSON.stringify({
    name: 'Bench percentiles',
    feature_flag_key: FLAG,
    start_date: startDate.toISOString(),
    metrics: Object.values(configurations),
  }),
});
const created = await res.json();
await api.stop();
if (res.status !== 201) throw new Error(`creating the experiment: ${res.status} ${JSON.stringify(created)}`);
const experimentId: number = created.id;
const metricOf = Object.fromEntries(Object.keys(configurations).map((n, i) => [n, created.metrics[i]])) as Record<
  Name,
  unknown
>;

const pgStore = createPostgresEventStore(orm, { deleteChunk: 10_000 });
/** A backfill from the start of the experiment with `name`'s metric only: nothing stored before it. */
async function backfill(name: Name, events: EventStore): Promise<number> {
  await pool.query(`update experiment set metrics = $2 where id = $1`, [
    experimentId,
    JSON.stringify([metricOf[name]]),
  ]);
  for (const table of ['experiment_metric_result', 'experiment_person_state', 'experiment_metric_state'])
    await pool.query(`delete from ${table} where experiment_id = $1`, [experimentId]);
  const deps = { orm, logger, config: {}, connection: {}, queues: {}, events } as unknown as WorkerDeps;
  const job = { data: { experimentId } } as Job<JobData['experimentResults']>;
  return timed(() => computeExperimentResults(job, deps, now));
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
/** Each configuration REPS times, alternating, after an untimed warm-up; the medians and ratios printed. */
async function compare(store: string, events: EventStore) {
  const times = Object.fromEntries(Object.keys(configurations).map((n) => [n, [] as number[]])) as Record<
    Name,
    number[]
  >;
  await backfill('mean', events); // warm-up (caches), untimed
  for (let r = 0; r < REPS; r++)
    for (const name of Object.keys(configurations) as Name[]) {
      times[name].push(await backfill(name, events));
      progress(`  ${store}: run ${r + 1}/${REPS}, ${name}`);
    }
  console.log(`\n  backfill of ${BACKFILL_DAYS} days, one metric, ${store} store, ${REPS} runs each (s):`);
  for (const name of Object.keys(configurations) as Name[])
    console.log(
      `    ${name.padEnd(22)} ${times[name].map((t) => (t / 1000).toFixed(2)).join(' / ')}  median ${(median(times[name]) / 1000).toFixed(2)} s` +
        (name === 'mean'
          ? ''
          : `  ratio to mean ${(median(times[name]) / median(times.mean)).toFixed(2)} (target <= 1.3)`),
    );
  // The last run's answer (percentile per event): the last day's quantile, as a check that it computed.
  const { rows } = await pool.query(
    `select result->'baseline'->>'quantile' as q, result->'baseline'->>'number_of_samples' as n
       from experiment_metric_result where experiment_id = $1 order by day desc limit 1`,
    [experimentId],
  );
  console.log(`    (per event, last day: control ${rows[0]?.n} exposures, P90 of amount ${rows[0]?.q})`);
}

await compare('PostgreSQL', pgStore);
// The same on the ClickHouse store (chDB in this process; BENCH_CLICKHOUSE=0 skips it).
if (process.env.BENCH_CLICKHOUSE !== '0') {
  const connection = createChdbConnection({ path: mkdtempSync(join(tmpdir(), 'bench-chdb-')) });
  const client = createClient({ connection: connection as unknown as ClickHouseClientConfigOptions['connection'] });
  const ch = createClickHouseEventStore(client, 'bench', { em: orm.em });
  await ch.migrate();
  await pool.query(`delete from event_shipment`); // a fresh engine: earlier runs' marks do not apply
  const shipped = await backfillEvents(orm, ch, {
    projectId: pid,
    batchSize: 50_000,
    settleSeconds: 0,
    onProgress: (p) => progress(`  shipped ${p.events} / ${p.total} events to ClickHouse`),
  });
  console.log(`\n  ClickHouse: ${shipped.events} events shipped`);
  await client.command({ query: `OPTIMIZE TABLE bench.events FINAL` });
  await compare('ClickHouse', ch);
  await client.close();
}
await orm.close();
await pool.end();
