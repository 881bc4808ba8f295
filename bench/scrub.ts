// A scrub by content (POST …/event_scrubs/, action delete) against a raw DELETE of the same kind of
// rows on PostgreSQL, side by side. The project holds BENCH_EVENTS events (default 2,000,000) over 300
// days; after an untimed warm-up of each side, BENCH_ROUNDS rounds (default 3) each delete BENCH_MATCHING of them (default 200,000) twice: one
// set (event 'purchase', property batch = r<n>a) by one raw DELETE with the same predicate, the other
// (batch = r<n>b, as many rows, as spread) by the scrub job (runScrub: claim, counts before, windowed
// deletes of DELETION_CHUNK_SIZE rows, counts after, signed receipt). The order alternates by round
// (raw first in odd rounds), with a checkpoint before each side. The target: 1,000,000 of
// 10,000,000 at most 1.5× the raw DELETE (BENCH_EVENTS=10000000 BENCH_MATCHING=1000000).
import { loadavg } from 'node:os';
import { config } from '../shared/platform/config.ts';
import { logger } from '../shared/platform/logger.ts';
import { createPostgresEventStore } from '../shared/events/index.ts';
import { runScrub } from '../shared/scrubs/index.ts';
import type { WorkerDeps } from '../worker/deps.ts';
import { benchSetup, median, withoutEventIndexes } from './harness.ts';
import { progress, timed } from './stats.ts';

const EVENTS = Number(process.env.BENCH_EVENTS ?? 2_000_000);
const MATCHING = Number(process.env.BENCH_MATCHING ?? 200_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
/** The untimed warm-up's sets (each side once), a tenth of a round's. */
const WARM = Math.max(1, Math.floor(MATCHING / 10));
const TARGET = 1.5;
const DAYS = 300;
const loadAverage = () =>
  loadavg()
    .map((l) => l.toFixed(2))
    .join(' ');

const { orm, account, pool } = await benchSetup();
const pid = account.projectId;
const sets = Array.from({ length: ROUNDS }, (_, r) => [`r${r}a`, `r${r}b`]).flat();
const other = EVENTS - MATCHING * sets.length - 2 * WARM;
if (other < 0) throw new Error('BENCH_EVENTS must exceed BENCH_MATCHING × 2 × BENCH_ROUNDS');

console.log(`scrub: generating ${EVENTS} events (${sets.length} sets of ${MATCHING} matching)…`);
await withoutEventIndexes(pool, async () => {
  // Each set's rows and the others spread evenly over the range, interleaved in time.
  const insert = async (count: number, event: string, batch: string) => {
    for (let start = 0; start < count; start += 500_000) {
      const n = Math.min(500_000, count - start);
      await pool.query(
        `insert into event (uuid, project_id, event, distinct_id, properties, timestamp, created_at)
         select gen_random_uuid(), $1, $2, 'd-' || (g % 20000), jsonb_build_object('batch', $3::text, 'g', g),
                now() - make_interval(secs => (g::float8 * $6 * 86400 / $5)::int), now() - interval '1 hour'
           from generate_series($4::int, $4::int + $7::int - 1) g`,
        [pid, event, batch, start, count, DAYS, n],
      );
      progress(`  ${event} ${batch}: ${start + n}`);
    }
  };
  for (const set of sets) await insert(MATCHING, 'purchase', set);
  for (const set of ['warm-a', 'warm-b']) await insert(WARM, 'purchase', set);
  await insert(Math.floor(other / 2), 'purchase', 'keep');
  await insert(other - Math.floor(other / 2), 'pageview', 'keep');
  progress('  building the event indexes…');
});
console.log('');
await pool.query('vacuum analyze event');
await pool.query('checkpoint');

const deps = {
  orm,
  logger,
  config,
  events: createPostgresEventStore(orm, { deleteChunk: config.deletion.chunkSize }),
  connection: null,
  queues: { webhooks: { addBulk: async () => [] } },
} as unknown as WorkerDeps;

const range = {
  after: new Date(Date.now() - (DAYS + 1) * 86_400_000).toISOString(),
  before: new Date(Date.now() + 86_400_000).toISOString(),
};

async function raw(batch: string): Promise<{ ms: number; rows: number }> {
  let rows = 0;
  const ms = await timed(async () => {
    const result = await pool.query(
      `delete from event where project_id = $1 and event = 'purchase' and properties->>'batch' = $2
          and timestamp >= $3 and timestamp < $4`,
      [pid, batch, range.after, range.before],
    );
    rows = result.rowCount ?? 0;
  });
  return { ms, rows };
}

async function scrub(batch: string): Promise<{ ms: number; rows: number; verifyMs: number }> {
  const filter = {
    event: 'purchase',
    properties: [{ key: 'batch', value: batch, operator: 'exact', type: 'event' }],
    ...range,
    distinct_ids: null,
    keys: null,
  };
  const { rows: made } = await pool.query<{ id: string }>(
    `insert into event_scrub (project_id, target, action, mode, filter, run_after)
     values ($1, 'events', 'delete', 'now', $2::jsonb, now()) returning id::text`,
    [pid, JSON.stringify(filter)],
  );
  let rows = 0;
  let verifyMs = 0;
  const ms = await timed(async () => {
    const result = await runScrub(
      { id: 'bench', data: { scrubId: made[0].id }, updateProgress: async () => undefined } as never,
      deps,
    );
    rows = 'changed' in result ? (result.changed.postgres ?? 0) : -1;
  });
  // The share of the scrub that is its verification: the count after, as the job runs it, again.
  verifyMs = await timed(() =>
    deps.events.scrubEventCounts(pid, {
      event: 'purchase',
      properties: filter.properties,
      after: new Date(range.after),
      before: new Date(range.before),
      distinctIds: null,
      cutoff: new Date().toISOString(),
    }),
  );
  return { ms, rows, verifyMs };
}

// Untimed: the first scrub of the process loads the receipts' key and both sides' first statements
// meet the load's hint bits; the rounds then start alike.
await raw('warm-a');
await scrub('warm-b');
const ratios: number[] = [];
const rawMs: number[] = [];
const scrubMs: number[] = [];
const verifyMs: number[] = [];
for (let r = 0; r < ROUNDS; r++) {
  const [a, b] = [`r${r}a`, `r${r}b`];
  let rawRun: { ms: number; rows: number };
  let scrubRun: { ms: number; rows: number; verifyMs: number };
  const side = async <T>(fn: () => Promise<T>) => {
    await pool.query('checkpoint');
    return fn();
  };
  if (r % 2 === 0) {
    rawRun = await side(() => raw(a));
    scrubRun = await side(() => scrub(b));
  } else {
    scrubRun = await side(() => scrub(b));
    rawRun = await side(() => raw(a));
  }
  if (rawRun.rows !== MATCHING || scrubRun.rows !== MATCHING)
    throw new Error(`round ${r}: raw deleted ${rawRun.rows}, scrub ${scrubRun.rows}, expected ${MATCHING} each`);
  rawMs.push(rawRun.ms);
  scrubMs.push(scrubRun.ms);
  verifyMs.push(scrubRun.verifyMs);
  ratios.push(scrubRun.ms / rawRun.ms);
  console.log(
    `round ${r + 1}: raw DELETE ${rawRun.ms.toFixed(0)} ms, scrub ${scrubRun.ms.toFixed(0)} ms (${MATCHING} rows each) → ${(
      scrubRun.ms / rawRun.ms
    ).toFixed(2)}× (its count after, alone: ${scrubRun.verifyMs.toFixed(0)} ms) · load ${loadAverage()}`,
  );
}
const ratio = median(ratios);
console.log(
  `\nscrub of ${MATCHING} of ${EVENTS} events: median raw ${median(rawMs).toFixed(0)} ms, scrub ${median(scrubMs).toFixed(0)} ms, ` +
    `scrub/raw ${ratio.toFixed(2)}× (target ≤ ${TARGET}×) ${ratio <= TARGET ? 'OK' : 'OVER'}; ` +
    `without its verifying count after ${median(scrubMs.map((m, i) => (m - verifyMs[i]) / rawMs[i])).toFixed(2)}× · load ${loadAverage()}`,
);
await pool.end();
await orm.close();
