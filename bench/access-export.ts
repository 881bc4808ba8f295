// `npm run bench -- access-export` (BENCH_EXPORT_EVENTS, default 1,000,000; BENCH_ROUNDS 3): one person's
// access export (the worker's job body, buildAccessExport: the events from a server-side cursor as
// NDJSON, with every other part, manifest, signature and SHA256SUMS, into a .tar.gz on disk) against
// `COPY (select … from event where …) TO STDOUT` of the same rows by psql into a file on the same disk,
// side by side in alternating order, BENCH_ROUNDS rounds after an untimed warm-up of each. The person's
// events are among as many of other persons in the same project. Target: the export ≤ 2× the COPY.
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtemp, rm, stat } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { buildAccessExport } from '../shared/access-exports/index.ts';
import { createEventStore } from '../shared/events/index.ts';
import { config } from '../shared/platform/config.ts';
import { logger } from '../shared/platform/logger.ts';
import { db } from '../shared/platform/db/kysely.ts';
import { sql } from 'kysely';
import { BENCH_DATABASE_URL, benchSetup, median } from './harness.ts';
import { progress, timed } from './stats.ts';

const exec = promisify(execFile);
const EVENTS = Number(process.env.BENCH_EXPORT_EVENTS ?? 1_000_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const TARGET = 2;
const loadAverage = () =>
  loadavg()
    .map((l) => l.toFixed(2))
    .join(' ');

const { orm, account, pool } = await benchSetup();
const dir = await mkdtemp(join(tmpdir(), 'bench-access-export-'));
const pid = account.projectId;
const personUuid = randomUUID();
const distinctId = `bench-export-${personUuid.slice(0, 8)}`;

progress(`loading ${EVENTS.toLocaleString()} events of one person and as many of others …`);
const {
  rows: [{ id: personId }],
} = await pool.query<{ id: string }>(
  `insert into person (project_id, uuid, properties) values ($1, $2, '{"email": "bench@example.com"}') returning id::text`,
  [pid, personUuid],
);
await pool.query(`insert into person_distinct_id (project_id, person_id, distinct_id) values ($1, $2, $3)`, [
  pid,
  personId,
  distinctId,
]);
// A web SDK's pageview-sized properties (about 300 bytes), spread over the last 60 days.
const load = (who: string, person: string | null, n: number) =>
  pool.query(
    `insert into event (uuid, project_id, event, distinct_id, person_id, properties, timestamp, created_at)
     select gen_random_uuid(), $1, case when g % 50 = 0 then '$feature_flag_called' else '$pageview' end, $2, $3,
            jsonb_build_object('$current_url', 'https://example.com/page/' || (g % 997), '$browser', 'Chrome',
              '$os', 'Mac OS X', '$session_id', md5((g / 40)::text), '$lib', 'web', '$lib_version', '1.180.0',
              '$feature_flag', 'checkout', '$feature_flag_response', case when g % 2 = 0 then 'test' else 'control' end,
              '$screen_height', 1080, '$screen_width', 1920, 'i', g),
            now() - make_interval(secs => (g::float8 * 5184000 / $4)), now() - make_interval(secs => (g::float8 * 5184000 / $4))
       from generate_series(1, $4::int) g`,
    [pid, who, person, n],
  );
for (let done = 0; done < EVENTS; done += 100_000) {
  const n = Math.min(100_000, EVENTS - done);
  await load(distinctId, personUuid, n);
  await load(`bench-other-${done}`, randomUUID(), n);
  progress(`loaded ${(done + n).toLocaleString()} of ${EVENTS.toLocaleString()} …`);
}
await pool.query(`analyze event`);

const cutoff = new Date().toISOString();
const copyStatement = `COPY (select uuid, event, distinct_id, person_id, properties, timestamp, created_at from event
   where project_id = ${pid} and (person_id = '${personUuid}' or distinct_id = '${distinctId}') and created_at <= '${cutoff}') TO STDOUT`;

async function copy(round: number): Promise<{ ms: number; bytes: number }> {
  const file = join(dir, `copy-${round}.tsv`);
  const ms = await timed(() =>
    exec('sh', ['-c', `psql "$URL" -X -q -c "$STATEMENT" > "$FILE"`], {
      env: { ...process.env, URL: BENCH_DATABASE_URL, STATEMENT: copyStatement, FILE: file },
    }),
  );
  const bytes = (await stat(file)).size;
  await rm(file);
  return { ms, bytes };
}

const deps = {
  config: { ...config, accessExports: { ...config.accessExports, dir: join(dir, 'archives') } },
  orm,
  logger,
  events: createEventStore(config, orm),
  queues: null,
  connection: null,
} as any;

async function exportOnce(): Promise<{ ms: number; bytes: number; rows: number }> {
  const { id } = await db(orm.em.fork())
    .insertInto('access_export')
    .values({
      project_id: pid,
      person_uuids: sql<string[]>`${[personUuid]}::uuid[]`,
      person_ids: sql<string[]>`${[personId]}::bigint[]`,
      distinct_ids: sql<string[]>`${[distinctId]}::text[]`,
      cutoff: sql`${cutoff}::timestamptz`,
    })
    .returning(sql<string>`id::text`.as('id'))
    .executeTakeFirstOrThrow();
  let result: any;
  const ms = await timed(async () => {
    result = await buildAccessExport({ data: { exportId: id } } as any, deps);
  });
  const rows = result.rows.find((f: any) => f.name === 'events.ndjson').rows;
  const { rows: found } = await pool.query(`select file_path from access_export where id = $1`, [id]);
  await rm(found[0].file_path);
  return { ms, bytes: result.bytes, rows };
}

progress('warm-up …');
const warmCopy = await copy(0);
const warmExport = await exportOnce();
if (warmExport.rows !== EVENTS) throw new Error(`exported ${warmExport.rows} events, expected ${EVENTS}`);
const copies: number[] = [];
const exports: number[] = [];
for (let round = 1; round <= ROUNDS; round++) {
  const order = round % 2 ? ['export', 'copy'] : ['copy', 'export'];
  for (const side of order) {
    if (side === 'copy') copies.push((await copy(round)).ms);
    else exports.push((await exportOnce()).ms);
  }
  progress(
    `round ${round}: export ${exports.at(-1)!.toFixed(0)} ms, COPY ${copies.at(-1)!.toFixed(0)} ms (load ${loadAverage()})`,
  );
}
console.log('');
const ratio = median(exports) / median(copies);
console.log(
  `access export of ${EVENTS.toLocaleString()} events: ${median(exports).toFixed(0)} ms (archive ${(warmExport.bytes / 1e6).toFixed(1)} MB)` +
    ` vs COPY TO STDOUT ${median(copies).toFixed(0)} ms (${(warmCopy.bytes / 1e6).toFixed(1)} MB): ` +
    `${ratio.toFixed(2)}× (target ≤ ${TARGET}×; rounds ${exports.map((e, i) => (e / copies[i]).toFixed(2)).join(', ')}), load ${loadAverage()}`,
);
await pool.query(`delete from event where project_id = $1`, [pid]);
await pool.end();
await orm.close();
await rm(dir, { recursive: true, force: true });
process.exit(ratio <= TARGET ? 0 : 1);
