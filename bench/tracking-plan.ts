// Tracking plans, two figures (bench/README.md "tracking-plan"):
//   1. capture with a 50-event plan that validates every event (each event's JSON Schema 2020-12, compiled
//      once per version) against the same capture of a project without a plan, on the same API process:
//      gzipped /batch requests of 100 personless events over the 50 names, at BENCH_CONCURRENCY (8)
//      senders, in interleaved pairs of windows (BENCH_PAIRS, BENCH_WINDOW_SECONDS). Target ≥ 0.9×.
//   2. replay of BENCH_QUARANTINED (default 100,000) quarantined events (500 distinct ids, persons made)
//      by the worker's job body, against one INSERT … SELECT of the same rows into the event table
//      (the least any replay must write), each on its own copy of the rows; then 0 duplicates checked.
//      The target: 1,000,000 in at most 2 minutes.
import { randomUUID } from 'node:crypto';
import os from 'node:os';
import { gzipSync } from 'node:zlib';
import pg from 'pg';
import { logger } from '../shared/platform/logger.ts';
import { insertReplay, putPlan, replayQuarantineJob } from '../shared/tracking-plan/index.ts';
import { createAccount } from '../test/helpers.ts';
import {
  BENCH_DATABASE_URL,
  benchSetup,
  closeIdleConnections,
  interleavedPairs,
  type PairSide,
  postOk,
  printPairs,
  startServerProcess,
} from './harness.ts';
import { progress } from './stats.ts';

const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 8);
const QUARANTINED = Number(process.env.BENCH_QUARANTINED ?? 100_000);
const ONLY = process.env.BENCH_ONLY; // capture | replay
const BATCH = 100;
const NAMES = 50;
const loadAverage = () => os.loadavg()[0].toFixed(1);

const { orm, pool: meterPool } = await benchSetup();
const pool = new pg.Pool({ connectionString: BENCH_DATABASE_URL, max: 4 });

/** The plan: 50 events, each with a schema of four typed properties the bench's events follow. */
const plan = {
  default_mode: 'allow',
  events: Object.fromEntries(
    Array.from({ length: NAMES }, (_, i) => [
      `event_${i}`,
      {
        mode: 'quarantine',
        schema: {
          type: 'object',
          required: ['path', 'n'],
          properties: {
            path: { type: 'string', maxLength: 200 },
            n: { type: 'integer', minimum: 0 },
            plan: { enum: ['free', 'pro', 'team'] },
            $current_url: { type: 'string', format: 'uri' },
          },
        },
      },
    ]),
  ),
};

if (ONLY !== 'replay') {
  const planned = await createAccount(orm);
  const plain = await createAccount(orm);
  await putPlan(orm.em.fork(), planned.projectId, planned.userId, plan);
  const api = await startServerProcess(['api/main.ts'], { timeoutMs: 120_000 });
  let batchNumber = 0;
  const batch = (i: number) =>
    Array.from({ length: BATCH }, (_, j) => ({
      event: `event_${j % NAMES}`,
      distinct_id: `anon-${i}-${j % 10}`,
      uuid: randomUUID(),
      timestamp: new Date().toISOString(),
      properties: {
        $lib: 'bench',
        $process_person_profile: false,
        $current_url: `https://example.com/page/${j}`,
        path: `/page/${j}`,
        n: j,
        plan: ['free', 'pro', 'team'][j % 3],
      },
    }));
  const side = (name: string, token: string): PairSide => {
    let last = 0;
    return {
      name,
      serverPid: api.child.pid,
      warmup: 50,
      request: async () => {
        if (Date.now() - last > 4000) closeIdleConnections();
        const body = gzipSync(
          JSON.stringify({ api_key: token, sent_at: new Date().toISOString(), batch: batch(batchNumber++) }),
        );
        await postOk(`${api.baseUrl}/batch/`, body, { 'content-encoding': 'gzip' });
        last = Date.now();
      },
    };
  };
  const loadBefore = loadAverage();
  const a = side('50-event plan', planned.projectToken);
  const b = side('no plan', plain.projectToken);
  const result = await interleavedPairs({ a, b, concurrency: CONCURRENCY, meterPool });
  printPairs(`capture, ${CONCURRENCY} senders, ${BATCH} events per request`, { a, b }, result);
  const [{ held }] = (
    await pool.query<{ held: number }>(`select count(*)::int as held from quarantined_event where project_id = $1`, [
      planned.projectId,
    ])
  ).rows;
  console.log(
    `  capture with a 50-event plan: ratio ${result.median.ratio.toFixed(2)}× (target ≥ 0.9) load ${loadBefore}–${loadAverage()}` +
      ` (${os.availableParallelism()} cores); events quarantined: ${held} (every event validated, none violating)`,
  );
  await api.stop();
}

/** N quarantined events of a fresh project, written straight into the quarantine. */
async function quarantine(projectId: number, n: number): Promise<void> {
  for (let start = 0; start < n; start += 50_000) {
    const size = Math.min(50_000, n - start);
    await pool.query(
      `insert into quarantined_event (project_id, uuid, event, distinct_id, properties, timestamp, violations, plan_version)
       select $1, gen_random_uuid(), 'event_' || (i % ${NAMES}), 'user-' || (i % 500),
              jsonb_build_object('$lib', 'bench', 'path', '/page/' || i, 'n', i, 'plan', 'pro'),
              now() - interval '1 hour', '[{"kind":"required","property":"n","message":"x"}]', 1
         from generate_series($2::int, $3::int) i`,
      [projectId, start, start + size - 1],
    );
    progress(`  quarantined ${start + size}/${n}`);
  }
}

if (ONLY !== 'capture') {
  // Baseline: the same rows copied by one INSERT … SELECT (no persons, no checks, no claim).
  const base = await createAccount(orm);
  await quarantine(base.projectId, QUARANTINED);
  const baseStarted = performance.now();
  await pool.query(
    `insert into event (uuid, project_id, event, distinct_id, person_id, properties, timestamp, created_at)
     select uuid, project_id, event, distinct_id, gen_random_uuid(), properties, timestamp, now()
       from quarantined_event where project_id = $1 on conflict do nothing`,
    [base.projectId],
  );
  const baseSeconds = (performance.now() - baseStarted) / 1000;

  const account = await createAccount(orm);
  await putPlan(orm.em.fork(), account.projectId, account.userId, plan);
  await quarantine(account.projectId, QUARANTINED);
  const replay = await insertReplay(orm.em.fork(), account.projectId, {}, account.userId, 'queued');
  const loadBefore = loadAverage();
  const started = performance.now();
  const ticker = setInterval(async () => {
    const { rows } = await pool.query(`select stored from tracking_plan_replay where id = $1`, [replay.id]);
    progress(`  replayed ${rows[0]?.stored ?? 0}/${QUARANTINED}`);
  }, 2000);
  const counts = await replayQuarantineJob({ data: { replayId: replay.id } }, { orm, logger });
  clearInterval(ticker);
  const seconds = (performance.now() - started) / 1000;
  const [{ n, distinct }] = (
    await pool.query<{ n: number; distinct: number }>(
      `select count(*)::int as n, count(distinct uuid)::int as distinct from event where project_id = $1`,
      [account.projectId],
    )
  ).rows;
  const rate = QUARANTINED / seconds;
  console.log(
    `  replay of ${QUARANTINED} quarantined events: ${seconds.toFixed(1)} s (${Math.round(rate)}/s), stored ${counts.stored},` +
      ` ${n - distinct} duplicates; INSERT … SELECT of the same rows ${baseSeconds.toFixed(1)} s` +
      ` (${Math.round(QUARANTINED / baseSeconds)}/s): ratio ${(baseSeconds / seconds).toFixed(2)}×; load ${loadBefore}–${loadAverage()}`,
  );
  console.log(`  1,000,000 at this rate: ${(1_000_000 / rate).toFixed(0)} s (target ≤ 120 s)`);
}

await pool.end();
await orm.close();
process.exit(0);
