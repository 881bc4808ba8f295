// Deleting the events of 1000 persons from a large event table (BENCH_EVENTS, default 10,000,000):
// the worker's chunked, verified deletion beside one raw DELETE … WHERE person_id = ANY(…) on a copy
// of the same data, and the p99 of person reads while the chunked deletion runs.
import { randomUUID } from 'node:crypto';
import { recordDeletionRequests } from '../shared/deletions/store.ts';
import { deletePersonData } from '../worker/jobs/delete-person-data.ts';
import { logger } from '../shared/logger.ts';
import { benchSetup } from './harness.ts';
import { percentile, progress, timed } from './stats.ts';

const EVENTS = Number(process.env.BENCH_EVENTS ?? 10_000_000);
const PERSONS = 20_000;
const VICTIMS = 1000;

const { orm, account, pool } = await benchSetup();
const pid = account.projectId;
const persons = Array.from({ length: PERSONS }, () => randomUUID());
await pool.query(`create temp table bench_persons (i int, uuid uuid)`);
await pool.query(`insert into bench_persons select g, ($1::uuid[])[g] from generate_series(1, $2::int) g`, [
  persons,
  PERSONS,
]);
console.log(`deletion: generating ${EVENTS} events over ${PERSONS} persons…`);
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
console.log('');
await pool.query(`create table event_bench_copy as select * from event where project_id = $1`, [pid]);
await pool.query(`create index on event_bench_copy (project_id, person_id, timestamp)`);
// Both tables as a live system has them (hint bits set and statistics fresh, as autovacuum leaves
// them) and no checkpoint of the bulk load still writing while the timed deletes run.
await pool.query('vacuum analyze event');
await pool.query('vacuum analyze event_bench_copy');
await pool.query('checkpoint');

const victims = persons.slice(0, VICTIMS);
const rawRows = (EVENTS / PERSONS) * VICTIMS;

// Person reads (an indexed lookup, as GET /persons/:id does) run back to back during both deletions,
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

const raw = await whileReading(() =>
  pool.query(`delete from event_bench_copy where project_id = $1 and person_id = any($2::uuid[])`, [pid, victims]),
);

// The worker starts as the raw DELETE did: no dirty pages of the other's run left to write out.
await pool.query('checkpoint');
const em = orm.em.fork();
const ids = await recordDeletionRequests(
  em as any,
  victims.map((key, i) => ({
    projectId: pid,
    type: 'person_events' as const,
    mode: 'immediate' as const,
    key,
    distinctIds: [`d-${i}`],
    createdById: null,
  })),
);
const deps = { orm, logger, config: {} as any, connection: {} as any, queues: {} as any };
const runJob = (id: string) =>
  deletePersonData({ data: { deletionId: id }, updateProgress: async () => undefined } as any, deps as any);
// The first request's job claims the whole batch; the other jobs, which a worker runs beside it, then
// find their requests taken (or done) and return at once. Timed apart so each figure says what it is.
const chunked = await whileReading(() => runJob(ids[0]));
const others = await timed(async () => {
  for (const id of ids.slice(1)) await runJob(id);
});
const [{ n: left }] = (
  await pool.query(`select count(*)::int as n from event where project_id = $1 and person_id = any($2::uuid[])`, [
    pid,
    victims,
  ])
).rows;
const [{ n: done }] = (
  await pool.query(
    `select count(*)::int as n from async_deletion where id = any($1::bigint[]) and status = 'completed'`,
    [ids],
  )
).rows;

const readFigures = (reads: number[]) =>
  `person reads p50 ${percentile(reads, 50).toFixed(2)} ms, p99 ${percentile(reads, 99).toFixed(2)} ms (${reads.length})`;
console.log(
  `  raw DELETE on the copy: ${rawRows} rows in ${(raw.ms / 1000).toFixed(2)} s = ${Math.round(rawRows / (raw.ms / 1000))} rows/s; ${readFigures(raw.reads)}`,
);
console.log(
  `  worker (the first job claims the batch; adaptive time windows, verified): ${rawRows} rows in ${(chunked.ms / 1000).toFixed(2)} s = ${Math.round(rawRows / (chunked.ms / 1000))} rows/s; left: ${left}; requests completed: ${done}`,
);
console.log(
  `  the other ${ids.length - 1} jobs (step aside): ${others.toFixed(0)} ms in all, ${(others / (ids.length - 1)).toFixed(2)} ms each`,
);
console.log(
  `  ratio: ${(raw.ms / chunked.ms).toFixed(2)} (target >= 0.5); during the worker's deletion: ${readFigures(chunked.reads)} (target p99 < 50 ms)`,
);

await pool.query(`drop table event_bench_copy`);
await pool.query(`delete from event where project_id = $1`, [pid]);
await pool.end();
await orm.close();
