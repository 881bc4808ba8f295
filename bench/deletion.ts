// Two parts (BENCH_ONLY=events,persons; both by default):
// events — deleting the events of 1000 persons from a large event table (BENCH_EVENTS, default
//   10,000,000): the worker's chunked, verified deletion beside one raw DELETE … WHERE person_id =
//   ANY(…) on a copy of the same data, and the p99 of person reads while the chunked deletion runs;
// persons — POST /flags (a flag on a person property: the person is read) right after 10,000 of
//   BENCH_DELETION_PERSONS (200,000) persons were deleted through bulk_delete while a reader's snapshot
//   was open, with autovacuum off on the tables, against the same before the delete and after the
//   statistics job's vacuum.
import { randomUUID } from 'node:crypto';
import { recordDeletionRequests } from '../shared/deletions/store.ts';
import { receiptSigner, recordEventsBefore, writeDeletionReceipts } from '../shared/deletions/receipts.ts';
import { deletePersonData } from '../worker/jobs/delete-person-data.ts';
import { createPostgresEventStore } from '../shared/events/postgres.ts';
import { logger } from '../shared/logger.ts';
import { benchSetup, loadFor, postOk, startApiProcess } from './harness.ts';
import { config } from '../shared/config.ts';
import { refreshStatistics } from '../worker/jobs/refresh-statistics.ts';
import { call, createAccount } from '../test/helpers.ts';
import { percentile, progress, timed } from './stats.ts';

const EVENTS = Number(process.env.BENCH_EVENTS ?? 10_000_000);
const PERSONS = 20_000;
const VICTIMS = 1000;

const { orm, account, pool } = await benchSetup();
const only = process.env.BENCH_ONLY?.split(',') ?? null;

async function eventDeletion() {
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
  const events = createPostgresEventStore(orm, { deleteChunk: config.deletion.chunkSize });
  const deps = { orm, logger, config, events, connection: {} as any, queues: {} as any };
  const runJob = (id: string) =>
    deletePersonData({ data: { deletionId: id }, updateProgress: async () => undefined } as any, deps as any);
  // The receipts' share: their counts before are taken here, timed apart (the job's own call then finds
  // them taken; the count reads the heap pages the deletes then find cached, so the figure overstates
  // its cost somewhat); their verification and signing are timed again after the job, in a rolled-back
  // transaction.
  const signer = await receiptSigner(em as any, config.deletion.receiptPrivateKey);
  const receiptsBefore = await timed(() => recordEventsBefore(em as any, events, ids));
  // The first request's job claims the whole batch; the other jobs, which a worker runs beside it, then
  // find their requests taken (or done) and return at once. Timed apart so each figure says what it is.
  const chunked = await whileReading(() => runJob(ids[0]));
  const rollback = new Error('rollback');
  let receiptsAfter = 0;
  await em
    .fork()
    .transactional(async (tx) => {
      await tx
        .getConnection()
        .execute(
          'delete from deletion_receipt where request_id = any(?::bigint[])',
          [`{${ids.join(',')}}`],
          'run',
          tx.getTransactionContext(),
        );
      const verified = { events: { after: 0, statement: 'select 0' } };
      receiptsAfter = await timed(() => writeDeletionReceipts(tx as any, ids, verified, signer));
      throw rollback;
    })
    .catch((error) => {
      if (error !== rollback) throw error;
    });
  const withoutReceipts = chunked.ms - receiptsAfter;
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
    `  receipts: counts before ${receiptsBefore.toFixed(0)} ms + verification and signing of ${ids.length} receipts ${receiptsAfter.toFixed(0)} ms = ${(((receiptsBefore + receiptsAfter) / withoutReceipts) * 100).toFixed(1)}% of the deletion without them (${withoutReceipts.toFixed(0)} ms; target < 10%)`,
  );
  console.log(
    `  the other ${ids.length - 1} jobs (step aside): ${others.toFixed(0)} ms in all, ${(others / (ids.length - 1)).toFixed(2)} ms each`,
  );
  console.log(
    `  ratio: ${(raw.ms / chunked.ms).toFixed(2)} (target >= 0.5); during the worker's deletion: ${readFigures(chunked.reads)} (target p99 < 50 ms)`,
  );

  await pool.query(`drop table event_bench_copy`);
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
    const deps = { orm, logger, config, connection: {} as any, queues: {} as any };
    let vacuumed: string[] = [];
    const vacuumMs = await timed(async () => {
      vacuumed = (await refreshStatistics(null, deps as any)).vacuumed;
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
await pool.end();
await orm.close();
