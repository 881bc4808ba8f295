// PostgreSQL as a buffer with EVENT_STORE=clickhouse (shared/events/buffer.ts): how long the trim takes
// to remove BENCH_EVENTS shipped events stored 30 days ago (default 1,000,000), two ways:
//   partition — they are one old month's partition, wholly past the line: TRUNCATE (no row read);
//   deletes   — the same rows beside one young event in their partition: the walk's chunked deletes
//               (DELETION_CHUNK_SIZE rows a statement).
// Then a second run of the trim with nothing left to remove. The shipment's mark is set past every
// event (ClickHouse is not involved: the trim only reads the mark). BENCH_ROUNDS rounds (default 3),
// medians printed. Use a database of its own: BENCH_DATABASE_URL.
//
// 2026-11-26, this shared 2-core machine at load 3–4, p50 of 3 rounds (DELETION_CHUNK_SIZE 100,000):
//   100,000 events:   partition emptied 60 ms, chunked deletes 149 ms (1 statement), a run with nothing left 10 ms
//   1,000,000 events: partition emptied 328 ms, chunked deletes 1688 ms (10 statements), nothing left 10 ms
// (the deletes also leave as many dead rows for VACUUM; the TRUNCATE none). The first version of the
// walk deleted by ctid matched against an array of the chunk's ctids: 81 s for 100,000 rows, each
// row compared with the whole array.
import { config } from '../shared/platform/config.ts';
import { trimShippedEvents } from '../shared/events/index.ts';
import { benchSetup } from './harness.ts';
import { percentile } from './stats.ts';

const EVENTS = Number(process.env.BENCH_EVENTS ?? 1_000_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const MONTH = { name: 'event_y2024m01', from: '2024-01-01T00:00:00Z', to: '2024-02-01T00:00:00Z' };

const { orm, account, pool } = await benchSetup();
const options = { bufferHours: 168, chunk: config.deletion.chunkSize, lockTimeoutMs: 2000 };

await pool.query(`create table if not exists ${MONTH.name} (like event including defaults)`);
await pool
  .query(`alter table event attach partition ${MONTH.name} for values from ('${MONTH.from}') to ('${MONTH.to}')`)
  .catch(() => undefined); // attached by an earlier run
await pool.query(`truncate event_trim`);
await pool.query(
  `insert into event_shipment (target, created_at, uuid) values ('clickhouse', now(), 'ffffffff-ffff-ffff-ffff-ffffffffffff')
   on conflict (target) do update set created_at = now(), uuid = excluded.uuid`,
);

/** BENCH_EVENTS events in the old month, stored 30 days ago; with `young`, one event stored now beside them. */
async function load(young: boolean) {
  await pool.query(`truncate ${MONTH.name}`);
  await pool.query(`update event_trim set created_at = '-infinity', uuid = '00000000-0000-0000-0000-000000000000'`);
  await pool.query(`delete from event_trim where isfinite(ts_from)`);
  await pool.query(
    `insert into event (uuid, project_id, event, distinct_id, person_id, properties, timestamp, created_at)
     select gen_random_uuid(), $1, 'pageview', 'd' || (g % 20000), null, '{}'::jsonb,
            '2024-01-02'::timestamptz + make_interval(secs => g % 2000000),
            now() - interval '30 days' + make_interval(secs => g % 86400)
       from generate_series(1, $2::int) g`,
    [account.projectId, EVENTS],
  );
  if (young)
    await pool.query(
      `insert into event (uuid, project_id, event, distinct_id, person_id, properties, timestamp, created_at)
       values (gen_random_uuid(), $1, 'pageview', 'young', null, '{}', '2024-01-20', now())`,
      [account.projectId],
    );
  await pool.query(`vacuum analyze ${MONTH.name}`);
}

async function timedTrim() {
  const t0 = performance.now();
  const result = await trimShippedEvents(orm, options);
  return { ms: performance.now() - t0, result };
}

const figures = { partition: [] as number[], deletes: [] as number[], again: [] as number[] };
for (let round = 1; round <= ROUNDS; round++) {
  await load(false);
  const whole = await timedTrim();
  if (whole.result.partitionsEmptied.length !== 1 || whole.result.rowsDeleted !== 0)
    throw new Error(`expected the partition emptied whole: ${JSON.stringify(whole.result)}`);
  figures.partition.push(whole.ms);
  figures.again.push((await timedTrim()).ms);

  await load(true);
  const rows = await timedTrim();
  if (rows.result.partitionsEmptied.length !== 0 || rows.result.rowsDeleted !== EVENTS)
    throw new Error(`expected ${EVENTS} rows deleted: ${JSON.stringify(rows.result)}`);
  figures.deletes.push(rows.ms);
  console.log(
    `round ${round}: partition emptied ${whole.ms.toFixed(0)} ms (estimated ${whole.result.partitionsEmptied[0].estimatedRows} rows); ` +
      `deletes ${rows.ms.toFixed(0)} ms (${rows.result.rowsDeleted} rows, ${rows.result.statements} statements); ` +
      `second run ${figures.again[figures.again.length - 1].toFixed(1)} ms`,
  );
}
const p50 = (xs: number[]) => percentile(xs, 50).toFixed(1);
console.log(
  `${EVENTS} events, p50 of ${ROUNDS}: partition emptied ${p50(figures.partition)} ms, ` +
    `chunked deletes ${p50(figures.deletes)} ms (${((EVENTS / percentile(figures.deletes, 50)) * 1000).toFixed(0)} rows/s), ` +
    `a run with nothing to remove ${p50(figures.again)} ms`,
);
await pool.query(`truncate ${MONTH.name}`);
await pool.end();
await orm.close();
