// Two parts (BENCH_ONLY=events,persons; both by default):
// events — deleting the events of 1000 persons at a time (one bulk_delete's batch) from a large event
//   table (BENCH_EVENTS, default 10,000,000, over 20,000 persons): BENCH_ROUNDS rounds (default 3), each
//   a pair of runs on fresh victims, one with receipts and one without, in alternating order (with
//   first in odd rounds), so the machine's drift between runs falls on both sides alike, after an
//   untimed warm-up run. Each run is one raw DELETE … WHERE person_id = ANY(…) of 1000 persons' rows,
//   then the worker's chunked, verified deletion of 1000 other persons' rows (as many), both from the
//   same partitioned event table with all its indexes, each with the p99 of person reads running
//   meanwhile. The worker is the real thing: a BullMQ Worker (WORKER_CONCURRENCY) on the deletions
//   queue in Redis (under BENCH_REDIS_PREFIX-deletion), timed from the enqueueing of the batch's 1000
//   jobs (as a window's release does) until none of them is waiting, delayed or active: the first job
//   claims the batch and removes the queued jobs of the requests it completed, the jobs that ran
//   beside it find their requests taken or done. Printed per run with the load average, then side
//   by side as medians over the rounds: receipts' share of the run time (target < 10%; also the median
//   of each round's own pair) and raw against worker (target ≥ 0.4×, with receipts), reads p99
//   (target < 50 ms);
// persons — POST /flags (a flag on a person property: the person is read) right after 10,000 of
//   BENCH_DELETION_PERSONS (200,000) persons were deleted through bulk_delete while a reader's snapshot
//   was open, with autovacuum off on the tables, against the same before the delete and after the
//   statistics job's vacuum.
import { randomUUID } from 'node:crypto';
import { loadavg } from 'node:os';
import { type Job, Worker } from 'bullmq';
import { recordDeletionRequests } from '../shared/deletions/index.ts';
import { createQueues, enqueueDeletions, QUEUE_NAMES, queuePrefix } from '../shared/platform/queues.ts';
import { createWorkerRedis } from '../shared/platform/redis.ts';
import { deletePersonData } from '../shared/deletions/index.ts';
import type { WorkerDeps } from '../worker/deps.ts';
import type { JobData } from '../shared/platform/jobs.ts';
import { logger } from '../shared/platform/logger.ts';
import { benchSetup, loadFor, postOk, startApiProcess, withoutEventIndexes } from './harness.ts';
import { config } from '../shared/platform/config.ts';
import { createEventStore } from '../shared/events/index.ts';
import { refreshStatistics } from '../shared/platform/db/statistics-job.ts';
import { call, createAccount } from '../test/helpers.ts';
import { percentile, progress, timed } from './stats.ts';

const EVENTS = Number(process.env.BENCH_EVENTS ?? 10_000_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const PERSONS = 20_000;
const VICTIMS = 1000;
/** raw DELETE time / worker time, with receipts: the worker may take up to 2.5 times as long. */
const RATIO_TARGET = 0.4;
/** The 1-, 5- and 15-minute load averages: the machine's other work during the figures. */
const loadAverage = () =>
  loadavg()
    .map((l) => l.toFixed(2))
    .join(' ');

const { orm, account, pool } = await benchSetup();
const only = process.env.BENCH_ONLY?.split(',') ?? null;

// The deletions queue is real (Redis, under a prefix of the bench's own); the webhooks and maintenance
// queues are not (no webhooks are configured in the bench; the vacuum a large delete queues is not run,
// as before, so every run meets the same table).
const benchConfig = { ...config, redisPrefix: `${process.env.BENCH_REDIS_PREFIX ?? 'bench'}-deletion` };
const connection = createWorkerRedis();
const queues = createQueues(connection, benchConfig);
const workerDeps = () =>
  ({
    orm,
    logger,
    config,
    events: createEventStore(config, orm),
    connection,
    queues: {
      ...queues,
      webhooks: { addBulk: async () => [] },
      maintenance: { add: async () => undefined },
    },
  }) as unknown as WorkerDeps;

async function eventDeletion() {
  const pid = account.projectId;
  const persons = Array.from({ length: PERSONS }, () => randomUUID());
  await pool.query(`create temp table bench_persons (i int, uuid uuid)`);
  await pool.query(`insert into bench_persons select g, ($1::uuid[])[g] from generate_series(1, $2::int) g`, [
    persons,
    PERSONS,
  ]);
  console.log(`deletion: generating ${EVENTS} events over ${PERSONS} persons…`);
  await withoutEventIndexes(pool, async () => {
    for (let start = 0; start < EVENTS; start += 500_000) {
      const n = Math.min(500_000, EVENTS - start);
      await pool.query(
        `insert into event (uuid, project_id, event, distinct_id, person_id, properties, timestamp, created_at)
         select gen_random_uuid(), $1, 'pageview', 'd-' || (g % $3), bp.uuid, '{}'::jsonb, now() - make_interval(secs => g), now() - interval '1 hour'
           from generate_series($2::int, $2::int + $4::int - 1) g join bench_persons bp on bp.i = (g % $3) + 1`,
        [pid, start, PERSONS, n],
      );
      progress(`  ${start + n} events`);
    }
    progress('  building the event indexes…');
  });
  console.log('');
  // The table as a live system has it (hint bits set and statistics fresh, as autovacuum leaves it)
  // and no checkpoint of the bulk load still writing while the timed deletes run.
  await pool.query('vacuum analyze event');
  await pool.query('checkpoint');

  const rowsPerRun = (EVENTS / PERSONS) * VICTIMS;
  const deps = workerDeps();
  const deletions = deps.queues.deletions;
  await deletions.obliterate({ force: true }); // nothing of an earlier, interrupted run
  let receiptsOn = true;
  const worker = new Worker(
    QUEUE_NAMES.deletions,
    (job: Job<JobData['deletion']>) => deletePersonData(job, deps, { receipts: receiptsOn }),
    {
      connection,
      prefix: queuePrefix(benchConfig),
      concurrency: config.worker.concurrency,
      lockDuration: config.worker.lockDurationMs,
    },
  );
  worker.on('failed', (job, error) => console.error(`  job ${job?.id} failed: ${error.message}`));
  await worker.waitUntilReady();
  // Resolves once no job of the queue is waiting, delayed or active: checked again after every job that ends.
  const untilQueueIdle = async () => {
    let ended = 0;
    let wake = () => {};
    const onEnd = () => {
      ended++;
      wake();
    };
    worker.on('completed', onEnd);
    worker.on('failed', onEnd);
    try {
      for (;;) {
        const seen = ended;
        const counts = await deletions.getJobCounts('waiting', 'delayed', 'prioritized', 'active');
        if (Object.values(counts).every((n) => n === 0)) return;
        if (ended === seen) await new Promise<void>((resolve) => (wake = resolve));
      }
    } finally {
      worker.off('completed', onEnd);
      worker.off('failed', onEnd);
    }
  };

  // Person reads (an indexed lookup, as GET /persons/:id does) run back to back during each deletion,
  // so the raw DELETE and the worker share the machine with the same load and their ratio is fair.
  async function whileReading(fn: () => Promise<unknown>): Promise<{ ms: number; reads: number[] }> {
    const reads: number[] = [];
    let running = true;
    const reader = (async () => {
      while (running)
        reads.push(
          await timed(() =>
            pool.query(`select * from person_distinct_id where project_id = $1 and distinct_id = $2`, [
              pid,
              `d-${Math.floor(Math.random() * PERSONS)}`,
            ]),
          ),
        );
    })();
    const ms = await timed(fn);
    running = false;
    await reader;
    return { ms, reads };
  }

  interface Run {
    receipts: boolean;
    raw: { ms: number; reads: number[] };
    worker: { ms: number; reads: number[] };
    /** The lead job's own time (it claims and deletes the batch), as BullMQ recorded it. */
    lead: number;
    /** Enqueueing the batch's jobs (part of the worker's time). */
    enqueueMs: number;
    /** Jobs of the batch other than the lead that ran their body (the rest were removed by the lead). */
    companionsRun: number;
    load: string;
    left: number;
    completed: number;
    signed: number;
  }

  // Run n deletes persons [2n, 2n + 2) thousands: the first thousand by the raw DELETE, the second by the worker.
  async function oneRun(n: number, receipts: boolean): Promise<Run> {
    const first = 2 * n * VICTIMS;
    const rawVictims = persons.slice(first, first + VICTIMS);
    const raw = await whileReading(() =>
      pool.query(`delete from event where project_id = $1 and person_id = any($2::uuid[])`, [pid, rawVictims]),
    );
    const workerFirst = first + VICTIMS;
    const victims = persons.slice(workerFirst, workerFirst + VICTIMS);
    // The worker starts as the raw DELETE did: no dirty pages of the other's run left to write out.
    await pool.query('checkpoint');
    const ids = await recordDeletionRequests(
      orm.em.fork(),
      victims.map((key, i) => ({
        projectId: pid,
        type: 'person_events' as const,
        mode: 'immediate' as const,
        key,
        distinctIds: [`d-${workerFirst + i}`],
        createdById: null,
      })),
    );
    // The batch's jobs enqueued as a window's release does, on the worker's queue: timed until none of
    // them is left waiting, delayed or active (the lead removes those of the requests it completed).
    receiptsOn = receipts;
    const ran = { lead: 0, others: 0 };
    const onCompleted = (job: Job, result: { requests?: number }) => {
      if (result?.requests) ran.lead = (job.finishedOn ?? 0) - (job.processedOn ?? 0);
      else ran.others++;
    };
    worker.on('completed', onCompleted);
    let enqueueMs = 0;
    const timedRun = await whileReading(async () => {
      enqueueMs = await timed(() => enqueueDeletions(deletions, ids));
      await untilQueueIdle();
    });
    worker.off('completed', onCompleted);
    const lead = ran.lead;
    const load = loadAverage();
    const count = async (statement: string, params: unknown[]) =>
      ((await pool.query(statement, params)).rows[0] as { n: number }).n;
    return {
      receipts,
      raw,
      worker: timedRun,
      lead,
      enqueueMs,
      companionsRun: ran.others,
      load,
      left: await count(`select count(*)::int as n from event where project_id = $1 and person_id = any($2::uuid[])`, [
        pid,
        victims,
      ]),
      completed: await count(
        `select count(*)::int as n from async_deletion where id = any($1::bigint[]) and status = 'completed'`,
        [ids],
      ),
      signed: await count(`select count(*)::int as n from deletion_receipt where request_id = any($1::bigint[])`, [
        ids,
      ]),
    };
  }

  const readFigures = (reads: number[]) =>
    `reads p50 ${percentile(reads, 50).toFixed(2)} ms, p99 ${percentile(reads, 99).toFixed(2)} ms (${reads.length})`;
  // A first run pays for what is cold (pages, plans, the signing key): untimed, on persons of its own.
  const warm = await oneRun(0, true);
  console.log(`  warm-up run: ${(warm.worker.ms / 1000).toFixed(2)} s, left ${warm.left}, receipts ${warm.signed}`);
  const runs: Run[] = [];
  for (let round = 0; round < ROUNDS && (2 * round + 3) * 2 * VICTIMS <= PERSONS; round++) {
    const order = round % 2 === 0 ? [true, false] : [false, true];
    for (const [k, receipts] of order.entries()) {
      const r = await oneRun(2 * round + k + 1, receipts);
      runs.push(r);
      console.log(
        `  round ${round + 1} ${receipts ? 'with receipts   ' : 'without receipts'}: worker ${rowsPerRun} rows in ${(r.worker.ms / 1000).toFixed(2)} s` +
          ` (raw DELETE ${(r.raw.ms / 1000).toFixed(2)} s, ratio ${(r.raw.ms / r.worker.ms).toFixed(2)}×, target ≥ ${RATIO_TARGET}×, load average ${r.load});` +
          ` lead job ${(r.lead / 1000).toFixed(2)} s, enqueue ${r.enqueueMs.toFixed(0)} ms, other jobs run ${r.companionsRun} of ${VICTIMS - 1}; left ${r.left}, completed ${r.completed}, receipts ${r.signed};` +
          ` worker ${readFigures(r.worker.reads)}; raw ${readFigures(r.raw.reads)}`,
      );
    }
  }
  const median = (values: number[]) => percentile(values, 50);
  const side = (receipts: boolean) => {
    const mine = runs.filter((r) => r.receipts === receipts);
    return {
      worker: median(mine.map((r) => r.worker.ms)),
      raw: median(mine.map((r) => r.raw.ms)),
      ratio: median(mine.map((r) => r.raw.ms / r.worker.ms)),
      reads: mine.flatMap((r) => r.worker.reads),
    };
  };
  const withR = side(true);
  const without = side(false);
  // Each round's pair (with and without receipts, back to back): receipts' share within the round.
  const pairs: number[] = [];
  for (let i = 0; i + 1 < runs.length; i += 2) {
    const [a, b] = runs[i].receipts ? [runs[i], runs[i + 1]] : [runs[i + 1], runs[i]];
    pairs.push(a.worker.ms / b.worker.ms - 1);
  }
  console.log(`  medians of ${runs.length / 2} run(s) each, ${rowsPerRun} rows of ${VICTIMS} persons per run:`);
  console.log(`                      with receipts   without receipts`);
  console.log(
    `    worker            ${(withR.worker / 1000).toFixed(2).padStart(10)} s   ${(without.worker / 1000).toFixed(2).padStart(10)} s`,
  );
  console.log(
    `    raw DELETE        ${(withR.raw / 1000).toFixed(2).padStart(10)} s   ${(without.raw / 1000).toFixed(2).padStart(10)} s`,
  );
  console.log(
    `    raw / worker      ${withR.ratio.toFixed(2).padStart(10)}×    ${without.ratio.toFixed(2).padStart(10)}×   (target ≥ ${RATIO_TARGET}× with receipts; load average ${loadAverage()})`,
  );
  console.log(
    `    reads p99         ${percentile(withR.reads, 99).toFixed(2).padStart(10)} ms  ${percentile(without.reads, 99).toFixed(2).padStart(10)} ms  (target < 50 ms)`,
  );
  console.log(
    `  receipts add ${(((withR.worker - without.worker) / without.worker) * 100).toFixed(1)}% to the worker's run time (target < 10%); ` +
      `median of the rounds' pairs ${(median(pairs) * 100).toFixed(1)}% (${pairs.map((p) => `${(p * 100).toFixed(1)}%`).join(', ')})`,
  );

  await worker.close();
  await deletions.obliterate({ force: true });
  await pool.query(`delete from event where project_id = $1`, [pid]);
}

const PERSON_ROWS = Number(process.env.BENCH_DELETION_PERSONS ?? 200_000);
const DELETED = 10_000;
const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);

async function personDeletion() {
  const target = await createAccount(orm);
  const pid = target.projectId;
  console.log(`deletion: ${PERSON_ROWS} persons, deleting the newest ${DELETED} through bulk_delete…`);
  await pool.query(
    `insert into person (uuid, project_id, properties)
     select gen_random_uuid(), $1, jsonb_build_object('email', 'u' || g || '@example.com')
       from generate_series(1, $2::int) g`,
    [pid, PERSON_ROWS],
  );
  await pool.query(
    `insert into person_distinct_id (project_id, person_id, distinct_id) select project_id, id, 'u-' || id from person
      where project_id = $1`,
    [pid],
  );
  const rule = { key: 'email', operator: 'icontains', value: '@example.com', type: 'person' };
  await pool.query(
    `insert into feature_flag (project_id, key, name, filters, active)
     values ($1, 'bench-email', 'email rule', $2::jsonb, true)`,
    [pid, JSON.stringify({ groups: [{ properties: [rule], rollout_percentage: 100 }] })],
  );
  const tables = ['person', 'person_distinct_id'];
  // The server's autovacuum setting must not decide the figures: off on these tables for the run.
  for (const t of tables) await pool.query(`alter table ${t} set (autovacuum_enabled = false)`);
  for (const t of tables) await pool.query(`vacuum analyze ${t}`);
  await pool.query('checkpoint');
  const ids = (await pool.query(`select id::text as id from person where project_id = $1 order by id`, [pid])).rows.map(
    (r) => r.id as string,
  );
  const victims = ids.slice(-DELETED); // the newest sign-ups: the upper end of the id indexes
  const survivors = ids.slice(0, -DELETED);
  const api = await startApiProcess();
  try {
    const ask = (i: number) =>
      postOk(
        `${api.baseUrl}/flags/?v=2`,
        JSON.stringify({ token: target.projectToken, distinct_id: `u-${survivors[(i * 7919) % survivors.length]}` }),
      );
    // The statement /flags runs for the person (personForFlags, shared/flags/store.ts): its planning time, median of 5.
    const planningMs = async () => {
      const times: number[] = [];
      for (let i = 0; i < 5; i++) {
        const { rows } = await pool.query(
          `explain (analyze, format json) select p.id, p.properties from person_distinct_id d
             join person p on p.id = d.person_id where d.project_id = $1 and d.distinct_id = $2`,
          [pid, `u-${survivors[i]}`],
        );
        times.push(rows[0]['QUERY PLAN'][0]['Planning Time']);
      }
      return percentile(times, 50);
    };
    const measure = async (name: string) => {
      progress(`  measuring ${name} for ${SECONDS}s…`);
      const planning = await planningMs();
      const latencies = await loadFor(SECONDS, 4, ask);
      return {
        name,
        rate: latencies.length / SECONDS,
        p50: percentile(latencies, 50),
        p99: percentile(latencies, 99),
        planning,
      };
    };
    for (let i = 0; i < 200; i++) await ask(i); // warm-up: caches, pool connections
    const before = await measure('before the delete');
    // A reader's snapshot open across the delete (a long export or report, as production has): the
    // deleted rows are not yet dead to everyone when queries first meet them, so their index entries
    // are not marked dead on the way, and every plan later walks them until a vacuum removes them.
    const reader = await pool.connect();
    await reader.query('begin isolation level repeatable read');
    await reader.query('select count(*) from person where project_id = $1', [pid]);
    const deleting = await timed(async () => {
      for (let i = 0; i < victims.length; i += 1000) {
        const res = await call(api.baseUrl, 'POST', `/api/projects/${pid}/persons/bulk_delete/`, {
          key: target.apiKey,
          body: { ids: victims.slice(i, i + 1000) },
        });
        if (res.status !== 200) throw new Error(`bulk_delete: ${res.status} ${res.text}`);
      }
    });
    for (let i = 0; i < 50; i++) await ask(i); // traffic meets the dead rows while the snapshot holds
    await reader.query('commit');
    reader.release();
    const afterDelete = await measure('right after the delete');
    // The statistics job sees dead rows once the API's connections reported them (within ~10 s of idling).
    const deadline = Date.now() + 60_000;
    const dead = async () =>
      (await pool.query(`select n_dead_tup::int as n from pg_stat_user_tables where relname = 'person'`)).rows[0].n;
    while ((await dead()) < DELETED && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
    const deps = workerDeps();
    let vacuumed: string[] = [];
    const vacuumMs = await timed(async () => {
      vacuumed = (await refreshStatistics(null, deps)).vacuumed;
    });
    const afterVacuum = await measure('after the vacuum');
    progress('');
    const line = (r: typeof before) =>
      `  ${r.name.padEnd(24)} ${String(Math.round(r.rate)).padStart(6)} req/s  p50 ${r.p50.toFixed(2).padStart(8)} ms` +
      `  p99 ${r.p99.toFixed(2).padStart(8)} ms  person query planning ${r.planning.toFixed(2).padStart(7)} ms` +
      `  (×${(r.rate / before.rate).toFixed(2)} of before)`;
    console.log(`  POST /flags/?v=2 (person-property flag), 4 clients, ${SECONDS}s each:`);
    for (const r of [before, afterDelete, afterVacuum]) console.log(line(r));
    console.log(
      `  bulk_delete of ${DELETED} persons: ${(deleting / 1000).toFixed(2)} s;` +
        ` statistics job: ${(vacuumMs / 1000).toFixed(2)} s,` +
        ` vacuumed ${vacuumed.join(', ') || 'nothing'}`,
    );
  } finally {
    await api.stop();
    for (const t of tables) await pool.query(`alter table ${t} reset (autovacuum_enabled)`);
    await pool.query(`delete from feature_flag where project_id = $1`, [pid]);
    await pool.query(`delete from person where project_id = $1`, [pid]);
  }
}

if (!only || only.includes('events')) await eventDeletion();
if (!only || only.includes('persons')) await personDeletion();
await Promise.all(Object.values(queues).map((q) => q.close()));
connection.disconnect();
await pool.end();
await orm.close();
