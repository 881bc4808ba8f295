// Experiment results on a large event set (bench/generate.ts: BENCH_EVENTS, default 10,000,000;
// BENCH_PERSONS 200,000; 90 days): the worker's 31-day backfill of three metrics (revenue, a
// cart → purchase funnel, pageviews per person) beside one hand-written as-of statement per metric for
// the whole range, in the same run and with the same work_mem. Side by side in one run: the job with
// SRM, CUPED (14-day lookback) and a Holm correction on, and with them off (the old job); the daily
// run (incremental: today from yesterday's stored counts and per-person state) and the same run
// computed from the start; and the run of the next day, which also advances the per-person state
// (yesterday's and today's events, from the day before yesterday's stored counts and state).
// And the new metric kinds (#46) side by side with a mean metric over the same events, through each
// store: every day's counts from the start of pageviews per person alone, then with a retention
// metric on the same pageviews (start $pageview, back on days 1–7); revenue per person alone, then
// with their average per person (BENCH_NEW_KINDS=0 skips it; BENCH_NEW_KINDS_REPS runs each, default
// BENCH_REPS).
import type { Job } from 'bullmq';
import type { JobData } from '../shared/platform/jobs.ts';
import type { WorkerDeps } from '../worker/deps.ts';
import { CHECKOUT_METRICS } from '../test/fixtures.ts';
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
import { createClickHouseEventStore } from '../shared/events/index.ts';
import { jsonText } from '../shared/events/index.ts';
import { backfillEvents } from '../shared/events/index.ts';
import { computeExperimentCounts, experimentForResults } from '../shared/experiments/index.ts';

/**
 * The as-of statements' property as a number, null when it is not one (the store's rule, results.ts
 * numericValue, in SQL): JSON numbers cast directly; strings only after a regex check, so a bad value
 * costs no exception. `prop` is a SQL expression of type jsonb.
 */
function numericProperty(prop: string): string {
  const re = `'^[[:space:]]*[-+]{0,1}([0-9]+[.]{0,1}[0-9]*|[.][0-9]+)([eE][-+]{0,1}[0-9]{1,4}){0,1}[[:space:]]*$'`;
  const text = `(${prop} #>> '{}')`;
  return `(case jsonb_typeof(${prop}) when 'number' then (${prop})::numeric
    when 'string' then case when length(${text}) <= 1000 and ${text} ~ ${re} then ${text}::numeric end end)`;
}

const EVENTS = Number(process.env.BENCH_EVENTS ?? 10_000_000);
const PERSONS = Number(process.env.BENCH_PERSONS ?? 200_000);
const DAYS = 90;
const BACKFILL_DAYS = 31;
const FLAG = 'bench-experiment';

const { orm, account, pool } = await benchSetup();
// BENCH_PROJECT=<id> reuses the data and experiment a run with BENCH_KEEP=1 left (same day only).
const reuse = process.env.BENCH_PROJECT ? Number(process.env.BENCH_PROJECT) : null;
const pid = reuse ?? account.projectId;
if (!reuse) {
  console.log(`experiment-results: generating ${EVENTS} events, ${PERSONS} persons, ${DAYS} days…`);
  const options = { projectId: pid, events: EVENTS, persons: PERSONS, days: DAYS, flagKey: FLAG };
  const generated = await withoutEventIndexes(pool, () => generateEvents(pool, options));
  console.log(`  generated in ${generated.seconds.toFixed(0)} s (${Math.round(EVENTS / generated.seconds)} events/s)`);
  await pool.query('vacuum analyze event');
}

const now = new Date();
const today = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate());
const startDate = new Date(today - (BACKFILL_DAYS - 1) * 86400_000 + 9 * 3600_000); // 31 days, today included
/** The experiment as users make it (metrics get their uuids and fingerprints from the API). */
async function createExperiment() {
  const api = await startApiProcess();
  const res = await fetch(`${api.baseUrl}/api/projects/${pid}/experiments/`, {
    method: 'POST',
    headers: { authorization: `Bearer ${account.apiKey}`, 'content-type': 'application/json' },
    body: JSON.stringify({
      name: 'Bench',
      feature_flag_key: FLAG,
      start_date: startDate.toISOString(),
      metrics: [
        ...CHECKOUT_METRICS,
        { kind: 'ExperimentMetric', metric_type: 'mean', source: { kind: 'EventsNode', event: '$pageview' } },
      ],
    }),
  });
  const created = await res.json();
  await api.stop();
  if (res.status !== 201) throw new Error(`creating the experiment: ${res.status} ${JSON.stringify(created)}`);
  return created;
}
const experiment = reuse
  ? (await pool.query(`select id, metrics from experiment where project_id = $1 order by id desc limit 1`, [reuse]))
      .rows[0]
  : await createExperiment();
await pool.query(`delete from experiment_metric_result where experiment_id = $1`, [experiment.id]);
const startQuery = await pool.query(`select start_date from experiment where id = $1`, [experiment.id]);
const startedAt = startQuery.rows[0].start_date;
const start = new Date(startedAt);

// One hand-written as-of statement per metric for the whole range (what one day of the old job ran).
const EXPOSURES = `exposures as (
  select d.person_id, min(e.properties->>'$feature_flag_response') as variant, min(e.timestamp) as t0
    from event e join person_distinct_id d on d.project_id = e.project_id and d.distinct_id = e.distinct_id
   where e.project_id = $1 and e.event = '$feature_flag_called' and e.properties->>'$feature_flag' = $2
     and e.properties->>'$feature_flag_response' in ('control', 'test') and e.timestamp >= $3 and e.timestamp < $4
   group by d.person_id having count(distinct e.properties->>'$feature_flag_response') = 1)`;
// Events are read first and joined to exposures after, as one would write it by hand: a join
// condition on the first exposure time invites one index scan of the event per exposed person.
const mean = (event: string, value: string) => `with ${EXPOSURES},
  ev as (select d.person_id, m.timestamp, m.properties from event m
           join person_distinct_id d on d.project_id = m.project_id and d.distinct_id = m.distinct_id
          where m.project_id = $1 and m.event = '${event}' and m.timestamp >= $3 and m.timestamp < $4),
  per_person as (
    select x.person_id, x.variant, coalesce(sum(${value}) filter (where m.timestamp >= x.t0), 0) as v
      from exposures x left join ev m on m.person_id = x.person_id
     group by 1, 2)
  select variant, count(*)::int as n, sum(v)::float8 as sum, sum(v * v)::float8 as sum_squares
    from per_person group by 1 order by 1`;
const FUNNEL = `with ${EXPOSURES},
  fe as (select d.person_id, m.event, m.timestamp as t from event m
           join person_distinct_id d on d.project_id = m.project_id and d.distinct_id = m.distinct_id
          where m.project_id = $1 and m.event in ('cart', 'purchase') and m.timestamp >= $3 and m.timestamp < $4),
  s1 as (select f.person_id, min(f.t) as t from exposures x
           join fe f on f.person_id = x.person_id and f.event = 'cart' and f.t >= x.t0 group by 1),
  s2 as (select f.person_id, min(f.t) as t from s1
           join fe f on f.person_id = s1.person_id and f.event = 'purchase' and f.t >= s1.t group by 1)
  select x.variant, count(*)::int as n, count(s1.person_id)::int as step1, count(s2.person_id)::int as step2
    from exposures x left join s1 using (person_id) left join s2 using (person_id) group by 1 order by 1`;
const baselines: [string, string][] = [
  ['revenue (sum of amount)', mean('purchase', `coalesce(${numericProperty(`m.properties -> 'amount'`)}, 0)`)],
  ['cart → purchase funnel', FUNNEL],
  ['pageviews per person', mean('$pageview', '1')],
];
const until = new Date(now.getTime() + 1);
interface BaselineRow {
  n: number;
  sum?: number;
  sum_squares?: number;
  step1?: number;
  step2?: number;
}
const baselineRows: BaselineRow[][] = [];
/** The as-of statements, one after another: their rows (baselineRows) and their total time. */
async function asOfStatements(print: boolean): Promise<number> {
  baselineRows.length = 0;
  let total = 0;
  for (const [name, sql] of baselines) {
    const client = await pool.connect();
    try {
      await client.query('begin');
      await client.query(`set local work_mem = '64MB'`); // as the worker does
      // The planner puts the exposures (conditions on jsonb properties) at about one row and joins
      // them by nested loops over the events, which is quadratic; the fair baseline is the good plan.
      await client.query(`set local enable_nestloop = off`);
      let rows: BaselineRow[] = [];
      const ms = await timed(async () => {
        rows = (await client.query(sql, [pid, FLAG, start, until])).rows;
      });
      await client.query('commit');
      baselineRows.push(rows);
      total += ms;
      if (print) console.log(`  as-of statement, ${name.padEnd(24)} ${(ms / 1000).toFixed(2)} s`);
    } finally {
      client.release();
    }
  }
  return total;
}
await asOfStatements(true);
// Timed again beside each pair of the job's runs below (like for like on a shared machine).
const asOfRuns: number[] = [];

// The PostgreSQL event store (the default engine): the job reads the experiment's events through it.
const events = createPostgresEventStore(orm, { deleteChunk: 10_000 });
const deps = { orm, logger, config: {}, connection: {}, queues: {}, events } as unknown as WorkerDeps;
const job = { data: { experimentId: experiment.id } } as Job<JobData['experimentResults']>;
const flag = (
  await pool.query(
    `select f.id, f.filters from feature_flag f join experiment x on x.feature_flag_id = f.id where x.id = $1`,
    [experiment.id],
  )
).rows[0];
/** The experiment's analysis settings: the new ones all on, or all off (the old job). */
async function configure(on: boolean) {
  const statsConfig = on
    ? {
        method: 'frequentist',
        cuped: { enabled: true, lookback_days: 14 },
        multiple_comparison_correction: { method: 'holm', scope: 'experiment' },
      }
    : { method: 'frequentist' };
  // Without rollout percentages on the flag's variants the job has no split to test: no SRM check.
  const variants = (flag.filters?.multivariate?.variants ?? []) as Record<string, unknown>[];
  const filters = {
    ...flag.filters,
    multivariate: {
      ...flag.filters?.multivariate,
      variants: variants.map(({ rollout_percentage, ...v }) => (on ? { ...v, rollout_percentage } : v)),
    },
  };
  await pool.query(`update experiment set stats_config = $2 where id = $1`, [
    experiment.id,
    JSON.stringify(statsConfig),
  ]);
  await pool.query(`update feature_flag set filters = $2 where id = $1`, [flag.id, JSON.stringify(filters)]);
}
type Run = Awaited<ReturnType<typeof computeExperimentResults>>;
let last: Run = { experiments: 0, results: 0, incremental: 0, full: 0 };
/** The job as of `asOf`; `fresh`: every stored result dropped first (a full backfill). */
async function runJob(asOf: Date, fresh: boolean): Promise<number> {
  if (fresh) await pool.query(`delete from experiment_metric_result where experiment_id = $1`, [experiment.id]);
  // Each run from the start rewrites the per-person state: vacuumed between runs, as the statistics
  // job (worker/jobs/refresh-statistics.ts) does between runs a day apart (here seconds apart).
  await pool.query('vacuum analyze experiment_person_state');
  return timed(async () => {
    last = await computeExperimentResults(job, deps, asOf);
  });
}
const seconds = (ms: number) => `${(ms / 1000).toFixed(2)} s`;
// Each configuration: the full backfill, then the next run (incremental: today from yesterday's
// stored counts), then the same run forced to compute from the start (late data would do that).
// BENCH_REPS pairs (default 3), the order alternating, for medians on a shared machine.
const REPS = Number(process.env.BENCH_REPS ?? 3);
type Figures = { backfill: number[]; daily: number[]; dailyFull: number[]; nextDay: number[]; runs: Run[] };
const figures: Record<'off' | 'on', Figures> = {
  off: { backfill: [], daily: [], dailyFull: [], nextDay: [], runs: [] },
  on: { backfill: [], daily: [], dailyFull: [], nextDay: [], runs: [] },
};
const DAY = 86400_000;
const yesterday = new Date(today - DAY).toISOString().slice(0, 10);
const nextDayRuns: Run[] = [];
// BENCH_JOB=0 skips the worker's job on PostgreSQL (the as-of statements still run once, for the
// ClickHouse section's check).
const JOB_ON = process.env.BENCH_JOB !== '0';
const median = (xs: number[]) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)];
const list = (xs: number[]) => xs.map((x) => (x / 1000).toFixed(2)).join(' / ');
const ratios = (a: number[], b: number[]) => a.map((x, i) => (x / b[i]).toFixed(2)).join(' / ');
const close = (a: number | undefined, b: number) => a !== undefined && Math.abs(a - b) <= 1e-9 * Math.abs(a);
const asOfTotal = () => median(asOfRuns);
/** Two answers (JSON) equal but for sums in the last bits: ClickHouse adds a person's values in its own order. */
const sameAnswer = (a: string, b: string): boolean => {
  const alike = (x: unknown, y: unknown): boolean =>
    typeof x === 'number' && typeof y === 'number'
      ? close(x, y) || x === y
      : Array.isArray(x) && Array.isArray(y)
        ? x.length === y.length && x.every((v, i) => alike(v, y[i]))
        : x && y && typeof x === 'object' && typeof y === 'object'
          ? Object.keys(x).length === Object.keys(y).length &&
            Object.entries(x).every(([k, v]) => alike(v, (y as Record<string, unknown>)[k]))
          : x === y;
  return alike(JSON.parse(a), JSON.parse(b));
};
if (!JOB_ON) asOfRuns.push(await asOfStatements(false));
else {
  for (let rep = 0; rep < REPS; rep++) {
    asOfRuns.push(await asOfStatements(false));
    for (const mode of rep % 2 ? (['on', 'off'] as const) : (['off', 'on'] as const)) {
      await configure(mode === 'on');
      const f = figures[mode];
      f.backfill.push(await runJob(now, true));
      f.runs.push(last);
      f.daily.push(await runJob(new Date(now.getTime() + 1000), false));
      f.runs.push(last);
      // Forced full: every row marked as computed before its day ended, so no stored day is complete.
      await pool.query(
        `update experiment_metric_result set computed_at = day::timestamp at time zone 'UTC' where experiment_id = $1`,
        [experiment.id],
      );
      f.dailyFull.push(await runJob(new Date(now.getTime() + 2000), false));
      f.runs.push(last);
      // The next day's run: stored as of this time yesterday (its days before yesterday done, and
      // computed after every event arrived), then run now: it reads yesterday's and today's events and
      // advances the state to yesterday's end.
      await runJob(new Date(now.getTime() - DAY), true);
      await pool.query(
        `update experiment_metric_result set computed_at = now() where experiment_id = $1 and day < $2::date`,
        [experiment.id, yesterday],
      );
      f.nextDay.push(await runJob(new Date(now.getTime() + 2500), false));
      nextDayRuns.push(last);
    }
  }
  // The results when the next run continues yesterday again (settings on; checked below).
  await configure(true);
  await pool.query(`update experiment_metric_result set computed_at = $2 where experiment_id = $1 and day < $3::date`, [
    experiment.id,
    now,
    new Date(today).toISOString().slice(0, 10),
  ]);
  await runJob(new Date(now.getTime() + 3000), false);
  const checked = last;

  // The last day of the worker's series (the incremental run, settings on) must be what the as-of statements say.
  const stored = (
    await pool.query(
      `select metric_uuid, status, result, error_message from experiment_metric_result
        where experiment_id = $1 and day = $2::date`,
      [experiment.id, new Date(today).toISOString().slice(0, 10)],
    )
  ).rows;
  interface StoredVariant {
    key: string;
    number_of_samples: number;
    sum: number;
    sum_squares: number;
    step_counts?: number[];
  }
  const agree = (experiment.metrics as { uuid: string; metric_type: string }[]).map((metric, i) => {
    const row = stored.find((r) => r.metric_uuid === metric.uuid);
    if (row?.status !== 'completed') return `${metric.metric_type}: ${row?.status} ${row?.error_message ?? ''}`;
    const mine: StoredVariant[] = [row.result.baseline, ...row.result.variant_results];
    mine.sort((a, b) => a.key.localeCompare(b.key));
    return baselineRows[i].every((b, j) =>
      metric.metric_type === 'funnel'
        ? b.n === mine[j].number_of_samples &&
          b.step1 === mine[j].step_counts?.[0] &&
          b.step2 === mine[j].step_counts?.[1]
        : b.n === mine[j].number_of_samples && close(b.sum, mine[j].sum) && close(b.sum_squares, mine[j].sum_squares),
    )
      ? 'same'
      : `differs: ${JSON.stringify(baselineRows[i])} vs ${JSON.stringify(mine)}`;
  });
  const { off, on } = figures;
  console.log(
    `  as-of statements, 3 metrics, whole range, beside each pair: ${list(asOfRuns)}  median ${seconds(asOfTotal())}`,
  );
  console.log(
    `  worker backfill, ${BACKFILL_DAYS} days × 3 metrics (${on.runs[0].results} results), ${REPS} pairs (s):`,
  );
  console.log(
    `    old job (no SRM, CUPED, correction)   ${list(off.backfill)}  median ${seconds(median(off.backfill))}`,
  );
  console.log(`    SRM + CUPED (14 days) + Holm          ${list(on.backfill)}  median ${seconds(median(on.backfill))}`);
  console.log(
    `    ratio on / off per pair: ${ratios(on.backfill, off.backfill)}; of the medians ${(median(on.backfill) / median(off.backfill)).toFixed(2)} (target <= 1.3); backfill / as-of: ${(median(off.backfill) / asOfTotal()).toFixed(2)} (target <= 2), per pair ${ratios(off.backfill, asOfRuns)}`,
  );
  const mode = (r: Run) => (r.incremental ? 'incremental' : 'full');
  console.log(`  daily run (today; ${mode(off.runs[1])} vs ${mode(off.runs[2])} from the start), ${REPS} each (s):`);
  for (const [label, f] of [
    ['old job', off],
    ['all on', on],
  ] as const) {
    console.log(
      `    ${label.padEnd(8)} incremental ${list(f.daily)}, from the start ${list(f.dailyFull)}; medians ${seconds(median(f.daily))} vs ${seconds(median(f.dailyFull))} (${(median(f.dailyFull) / median(f.daily)).toFixed(1)}×)`,
    );
  }
  console.log(
    `  next day's run (advances the state; ${nextDayRuns.map(mode).join(', ')}): old job ${list(off.nextDay)} median ${seconds(median(off.nextDay))}; all on ${list(on.nextDay)} median ${seconds(median(on.nextDay))}`,
  );
  console.log(`  last day (incremental, all on) vs as-of statements: ${agree.join('; ')} (${mode(checked)})`);
}

// ---- The new metric kinds beside a mean metric over the same events, through one store ----
const pageviews = { kind: 'ExperimentMetric', metric_type: 'mean', source: { kind: 'EventsNode', event: '$pageview' } };
const revenue = CHECKOUT_METRICS[0];
const revenueBy = (math: string) => ({
  ...revenue,
  source: { kind: 'EventsNode', event: 'purchase', math, math_property: 'amount' },
});
const NEW_KINDS: [string, object[], object[]][] = [
  [
    'pageviews per person + retention ($pageview → $pageview, days 1–7)',
    [pageviews],
    [
      pageviews,
      {
        kind: 'ExperimentMetric',
        metric_type: 'retention',
        start_event: { kind: 'EventsNode', event: '$pageview' },
        completion_event: { kind: 'EventsNode', event: '$pageview' },
        retention_window_start: 1,
        retention_window_end: 7,
        retention_window_unit: 'day',
        start_handling: 'first_seen',
      },
    ],
  ],
  ['revenue (sum) + avg of the same amounts', [revenue], [revenue, revenueBy('avg')]],
];
const newKindLines: string[] = [];
const NEW_KIND_REPS = Number(process.env.BENCH_NEW_KINDS_REPS ?? REPS);
/** Every day's counts from the start of each pair of metric lists through `store`, alternating. */
async function newKinds(store: typeof events, label: string) {
  const [row] = (
    await pool.query(
      `select x.*, f.key as flag_key, f.filters as flag_filters from experiment x join feature_flag f on f.id = x.feature_flag_id where x.id = $1`,
      [experiment.id],
    )
  ).rows;
  const forResults = experimentForResults({ ...row, stats_config: { method: 'frequentist' } });
  for (const [name, base, more] of NEW_KINDS) {
    const times = { base: [] as number[], more: [] as number[] };
    let failed = '';
    for (let rep = 0; rep < NEW_KIND_REPS; rep++)
      for (const which of rep % 2 ? (['more', 'base'] as const) : (['base', 'more'] as const)) {
        times[which].push(
          await timed(async () => {
            const counts = await computeExperimentCounts(
              orm.em.fork(),
              store,
              forResults,
              which === 'base' ? base : more,
              until,
            );
            const error = counts.find((c) => c instanceof Error);
            if (error) failed = error.message;
          }),
        );
      }
    if (failed) throw new Error(`${label}, ${name}: ${failed}`);
    const ratio = median(times.more) / median(times.base);
    newKindLines.push(
      `    ${label.padEnd(10)} ${name}: alone ${list(times.base)} (median ${seconds(median(times.base))}), with ${list(times.more)} (median ${seconds(median(times.more))}); ratio ${ratio.toFixed(2)} (target <= 1.3), per pair ${ratios(times.more, times.base)}`,
    );
  }
}
const NEW_KINDS_ON = process.env.BENCH_NEW_KINDS !== '0';
if (NEW_KINDS_ON) await newKinds(events, 'PostgreSQL');

// ---- The same backfill on the ClickHouse store (chDB, this process), BENCH_CLICKHOUSE=0 skips it ----
// The counts of every day from the start (computeExperimentCounts, nothing stored) through each
// store, alternating, beside each engine's best single statements for the same answer (one per
// metric, the last day: the PostgreSQL as-of statements above, and ClickHouse's with each event's
// person its distinct id's person now through the mirror, events counted once by uuid).
if (process.env.BENCH_CLICKHOUSE !== '0') {
  await configure(false);
  const connection = createChdbConnection({ path: mkdtempSync(join(tmpdir(), 'bench-chdb-')) });
  const client = createClient({ connection: connection as unknown as ClickHouseClientConfigOptions['connection'] });
  const ch = createClickHouseEventStore(client, 'bench', { em: orm.em });
  await ch.migrate();
  // A fresh engine: the marks a previous run left in this database do not apply to it.
  await pool.query(`delete from event_shipment`);
  const shipped = await backfillEvents(orm, ch, {
    projectId: pid,
    batchSize: 50_000,
    settleSeconds: 0,
    onProgress: (p) => progress(`shipped ${p.events} / ${p.total} events to ClickHouse`),
  });
  console.log(`\n  ClickHouse: ${shipped.events} events shipped in ${seconds(shipped.elapsedMs)}`);
  await client.command({ query: `OPTIMIZE TABLE bench.events FINAL` });
  const [row] = (
    await pool.query(
      `select x.*, f.key as flag_key, f.filters as flag_filters from experiment x join feature_flag f on f.id = x.feature_flag_id where x.id = $1`,
      [experiment.id],
    )
  ).rows;
  const forResults = experimentForResults(row);
  const lastDay = (counts: Awaited<ReturnType<typeof computeExperimentCounts>>) =>
    JSON.stringify(counts.map((c) => (c instanceof Error ? c.message : c.at(-1))));
  const map = `SELECT distinct_id, argMax(person_id, version) AS person_id FROM bench.person_distinct_id
                WHERE project_id = {p:Int64} GROUP BY distinct_id HAVING argMax(is_deleted, version) = 0`;
  const range = `project_id = {p:Int64} AND timestamp >= parseDateTime64BestEffort({start:String}, 6, 'UTC')
                 AND timestamp < parseDateTime64BestEffort({until:String}, 6, 'UTC')`;
  const exposures = `SELECT d.person_id AS person_id, any(e.r) AS variant, min(e.timestamp) AS t0
      FROM (SELECT distinct_id, timestamp, JSONExtractString(properties, '$feature_flag_response') AS r FROM bench.events
             WHERE ${range} AND event = '$feature_flag_called' AND JSONExtractString(properties, '$feature_flag') = {flag:String}
               AND r IN ('control', 'test') LIMIT 1 BY uuid) AS e
      INNER JOIN (${map}) AS d ON d.distinct_id = e.distinct_id
     GROUP BY d.person_id HAVING uniqExact(e.r) = 1`;
  const personEvents = (names: string, value: string) => `SELECT d.person_id AS person_id, e.event AS event,
           toUnixTimestamp64Micro(e.timestamp) AS t, ${value} AS v
      FROM (SELECT distinct_id, event, timestamp, properties FROM bench.events
             WHERE ${range} AND event IN (${names}) LIMIT 1 BY uuid) AS e
      INNER JOIN (${map}) AS d ON d.distinct_id = e.distinct_id`;
  const chMean = (
    event: string,
    value: string,
  ) => `SELECT variant, count() AS n, sum(v) AS sum, sum(v * v) AS sum_squares
      FROM (SELECT x.person_id, x.variant, sumIf(m.v, m.t >= toUnixTimestamp64Micro(x.t0)) AS v
              FROM (${exposures}) AS x LEFT JOIN (${personEvents(`'${event}'`, value)}) AS m ON m.person_id = x.person_id
             GROUP BY x.person_id, x.variant)
     GROUP BY variant ORDER BY variant`;
  const chFunnel = `SELECT variant, count() AS n, countIf(s1 > 0) AS step1, countIf(s2 > 0) AS step2
      FROM (SELECT variant, arrayMin(arrayFilter(c -> c >= t0, carts)) AS s1,
                   if(s1 > 0, arrayMin(arrayFilter(b -> b >= s1, buys)), 0) AS s2
              FROM (SELECT x.person_id, x.variant, toUnixTimestamp64Micro(any(x.t0)) AS t0,
                           groupArrayIf(f.t, f.event = 'cart') AS carts, groupArrayIf(f.t, f.event = 'purchase') AS buys
                      FROM (${exposures}) AS x LEFT JOIN (${personEvents(`'cart', 'purchase'`, '0')}) AS f ON f.person_id = x.person_id
                     GROUP BY x.person_id, x.variant))
     GROUP BY variant ORDER BY variant`;
  const amount = `ifNull(toFloat64OrNull(trimBoth(${jsonText('e.properties', "'amount'")})), 0)`;
  const chStatements = [chMean('purchase', amount), chFunnel, chMean('$pageview', '1')];
  const params = { p: pid, flag: FLAG, start: start.toISOString(), until: until.toISOString() };
  // The same with CUPED's covariate (the 14 days before each person's first exposure): the events read
  // from 14 days before the start.
  const lookback = 14 * DAY * 1000;
  const cupedEvents = (names: string, value: string) =>
    personEvents(names, value).replace(range, range.replace('{start:String}', '{lookbackStart:String}'));
  const chMeanCuped = (
    event: string,
    value: string,
  ) => `SELECT variant, count() AS n, sum(v) AS sum, sum(v * v) AS sum_squares,
           sum(cov) AS x, sum(cov * cov) AS xx, sum(cov * v) AS xy
      FROM (SELECT x.person_id, x.variant, sumIf(m.v, m.t >= toUnixTimestamp64Micro(x.t0)) AS v,
                   sumIf(m.v, m.t >= toUnixTimestamp64Micro(x.t0) - ${lookback} AND m.t < toUnixTimestamp64Micro(x.t0)) AS cov
              FROM (${exposures}) AS x LEFT JOIN (${cupedEvents(`'${event}'`, value)}) AS m ON m.person_id = x.person_id
             GROUP BY x.person_id, x.variant)
     GROUP BY variant ORDER BY variant`;
  const chFunnelCuped = `SELECT variant, count() AS n, countIf(s1 > 0) AS step1, countIf(s2 > 0) AS step2, sum(cov) AS x, sum(cov * (s2 > 0)) AS xy
      FROM (SELECT variant, cov, arrayMin(arrayFilter(c -> c >= t0, carts)) AS s1,
                   if(s1 > 0, arrayMin(arrayFilter(b -> b >= s1, buys)), 0) AS s2
              FROM (SELECT x.person_id, x.variant, toUnixTimestamp64Micro(any(x.t0)) AS t0,
                           groupArrayIf(f.t, f.event = 'cart') AS carts, groupArrayIf(f.t, f.event = 'purchase') AS buys,
                           countIf(f.event = 'purchase' AND f.t >= toUnixTimestamp64Micro(x.t0) - ${lookback}
                                   AND f.t < toUnixTimestamp64Micro(x.t0)) > 0 AS cov
                      FROM (${exposures}) AS x LEFT JOIN (${cupedEvents(`'cart', 'purchase'`, '0')}) AS f ON f.person_id = x.person_id
                     GROUP BY x.person_id, x.variant))
     GROUP BY variant ORDER BY variant`;
  const cupedStatements = [chMeanCuped('purchase', amount), chFunnelCuped, chMeanCuped('$pageview', '1')];
  const cupedParams = { ...params, lookbackStart: new Date(start.getTime() - 14 * DAY).toISOString() };
  const bestCuped = async () => {
    for (const query of cupedStatements)
      await (await client.query({ query, query_params: cupedParams, format: 'JSONEachRow' })).json();
  };
  const chRows: BaselineRow[][] = [];
  const timings = { pg: [] as number[], ch: [] as number[], chBest: [] as number[] };
  let answers = { pg: '', ch: '' };
  const bestStatements = async () => {
    chRows.length = 0;
    for (const query of chStatements) {
      const result = await client.query({ query, query_params: params, format: 'JSONEachRow' });
      chRows.push(
        (await result.json<Record<string, string | number>>()).map((r) => ({
          n: Number(r.n),
          sum: r.sum === undefined ? undefined : Number(r.sum),
          sum_squares: r.sum_squares === undefined ? undefined : Number(r.sum_squares),
          step1: r.step1 === undefined ? undefined : Number(r.step1),
          step2: r.step2 === undefined ? undefined : Number(r.step2),
        })),
      );
    }
  };
  // After PostgreSQL's run, ClickHouse's statements once untimed before the next ClickHouse timing:
  // chDB gives its memory back while PostgreSQL works, and the first statements after that gap pay
  // its page faults (bench/event-store.ts).
  let afterPostgres = false;
  const warm = async () => {
    if (afterPostgres) await bestStatements();
    afterPostgres = false;
  };
  for (let rep = 0; rep < REPS; rep++) {
    for (const engine of rep % 2 ? (['ch', 'pg'] as const) : (['pg', 'ch'] as const)) {
      if (engine === 'ch') await warm();
      let counts: Awaited<ReturnType<typeof computeExperimentCounts>> = [];
      timings[engine].push(
        await timed(async () => {
          counts = await computeExperimentCounts(
            orm.em.fork(),
            engine === 'pg' ? events : ch,
            forResults,
            row.metrics,
            until,
          );
        }),
      );
      answers = { ...answers, [engine]: lastDay(counts) };
      if (engine === 'pg') afterPostgres = true;
    }
    await warm();
    timings.chBest.push(await timed(bestStatements));
  }
  const sameRows = chRows.every(
    (rows, i) =>
      rows.length === baselineRows[i].length &&
      rows.every((r, j) => {
        const b = baselineRows[i][j];
        return (
          r.n === b.n && r.step1 === b.step1 && r.step2 === b.step2 && (r.sum === undefined || close(r.sum, b.sum ?? 0))
        );
      }),
  );
  const pgStore = median(timings.pg);
  const chStore = median(timings.ch);
  const chBest = median(timings.chBest);
  console.log(
    `  every day's counts from the start, ${BACKFILL_DAYS} days × 3 metrics (no CUPED), ${REPS} runs each (s):`,
  );
  console.log(
    `    PostgreSQL store   ${list(timings.pg)}  median ${seconds(pgStore)}; best statements ${seconds(asOfTotal())}; ratio ${(pgStore / asOfTotal()).toFixed(2)}`,
  );
  console.log(
    `    ClickHouse store   ${list(timings.ch)}  median ${seconds(chStore)}; best statements ${list(timings.chBest)} median ${seconds(chBest)}; ratio ${(chStore / chBest).toFixed(2)} (target <= 1.3); per pair ${ratios(timings.ch, timings.chBest)}`,
  );
  console.log(`    PostgreSQL store / ClickHouse store: ${(pgStore / chStore).toFixed(2)}`);
  // ClickHouse alone (no PostgreSQL work between: chDB shares this process, and a run right after
  // PostgreSQL's pays its page faults), the store and the statements alternating, once untimed first.
  const alone = { ch: [] as number[], chBest: [] as number[] };
  await computeExperimentCounts(orm.em.fork(), ch, forResults, row.metrics, until);
  for (let rep = 0; rep < REPS; rep++) {
    alone.ch.push(await timed(() => computeExperimentCounts(orm.em.fork(), ch, forResults, row.metrics, until)));
    alone.chBest.push(await timed(bestStatements));
  }
  console.log(
    `    ClickHouse alone   ${list(alone.ch)}  median ${seconds(median(alone.ch))}; best statements ${list(alone.chBest)} median ${seconds(median(alone.chBest))}; ratio ${(median(alone.ch) / median(alone.chBest)).toFixed(2)} (target <= 1.3); per pair ${ratios(alone.ch, alone.chBest)}`,
  );
  // With CUPED (14 days' lookback: each person's covariate folded in the engine too), beside the same statements.
  const cuped = { ...forResults, cupedLookbackDays: 14 };
  const withCuped = { ch: [] as number[], chBest: [] as number[] };
  for (let rep = 0; rep < REPS; rep++) {
    withCuped.ch.push(await timed(() => computeExperimentCounts(orm.em.fork(), ch, cuped, row.metrics, until)));
    withCuped.chBest.push(await timed(bestCuped));
  }
  console.log(
    `    ClickHouse store, CUPED 14 days  ${list(withCuped.ch)}  median ${seconds(median(withCuped.ch))}; best statements with the covariate ${list(withCuped.chBest)} median ${seconds(median(withCuped.chBest))}; ratio ${(median(withCuped.ch) / median(withCuped.chBest)).toFixed(2)} (target <= 1.3); per pair ${ratios(withCuped.ch, withCuped.chBest)}`,
  );
  console.log(
    `    answers: stores ${sameAnswer(answers.pg, answers.ch) ? 'same (sums to 1e-9)' : `differ: ${answers.pg} vs ${answers.ch}`}; ClickHouse statements vs PostgreSQL's: ${sameRows ? 'same' : `differ: ${JSON.stringify(chRows)} vs ${JSON.stringify(baselineRows)}`}`,
  );
  if (NEW_KINDS_ON) await newKinds(ch, 'ClickHouse');
  await ch.close();
}
if (NEW_KINDS_ON) {
  console.log(`  new metric kinds beside a mean metric over the same events, every day's counts from the start,`);
  console.log(`  ${BACKFILL_DAYS} days, ${NEW_KIND_REPS} runs each, alternating (s):`);
  for (const line of newKindLines) console.log(line);
}

if (!process.env.BENCH_KEEP) {
  // The bench database is shared by every benchmark: leave no millions of rows behind.
  await pool.query(`delete from event where project_id = $1`, [pid]);
  await pool.query(`delete from person where project_id = $1`, [pid]);
}
await pool.end();
await orm.close();
