// What recording reads costs (shared/access-log): GET person by id and the person list (a page of 100,
// each person on it recorded) through two API processes side by side, one recording as deployed
// (group-committed) and one not recording at all, in interleaved pairs of windows (bench/harness.ts).
// A third process records with one INSERT per request (what the log would cost without the group commit).
// Settings: BENCH_ACCESS_PERSONS (persons in the project, default 20,000), BENCH_CONCURRENCY (16),
// BENCH_PAIRS (3), BENCH_WINDOW_SECONDS (10), BENCH_UNBATCHED=0 skips the one-INSERT-per-request side,
// BENCH_ONLY=byid or list runs that comparison only.
import os from 'node:os';
import { fileURLToPath } from 'node:url';
import { benchSetup, getOk, interleavedPairs, type PairSide, printPairs, startServerProcess } from './harness.ts';
import { progress } from './stats.ts';

const PERSONS = Number(process.env.BENCH_ACCESS_PERSONS ?? 20_000);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 16);
const UNBATCHED = process.env.BENCH_UNBATCHED !== '0';
const ONLY = process.env.BENCH_ONLY; // byid or list: that comparison only
const TARGET = 0.9;
const loadAverage = () => os.loadavg()[0].toFixed(1);

const { orm, account, pool } = await benchSetup();
console.log(
  `access-log: ${PERSONS} persons, ${CONCURRENCY} clients, ${new Date().toISOString().slice(0, 10)}, ` +
    `load average ${loadAverage()} at the start (${os.cpus().length} cores)`,
);
for (let start = 0; start < PERSONS; start += 10_000) {
  const end = Math.min(PERSONS, start + 10_000);
  await pool.query(
    `with made as (
       insert into person (uuid, project_id, properties, created_at)
       select gen_random_uuid(), $1, jsonb_build_object('email', 'user' || g || '@example.com', 'plan', 'free', 'age', g % 90),
              now() - make_interval(secs => g)
         from generate_series($2::int, $3::int - 1) g
       returning id, properties->>'email' as email)
     insert into person_distinct_id (project_id, person_id, distinct_id) select $1, id, 'd-' || email from made`,
    [account.projectId, start, end],
  );
  progress(`  ${end} persons`);
}
if (process.stdout.isTTY) process.stdout.write('\n');
await pool.query('analyze person, person_distinct_id, person_access_log');
const uuids = (
  await pool.query<{ uuid: string }>('select uuid::text from person where project_id = $1', [account.projectId])
).rows.map((r) => r.uuid);

const mode = fileURLToPath(new URL('./baseline/access-log-mode.ts', import.meta.url));
// One after the other, with time to start on a busy machine.
const start = (recording: string) =>
  startServerProcess(['api/main.ts'], {
    env: { BENCH_ACCESS_LOG_MODE: recording },
    nodeArgs: [`--import=${mode}`],
    timeoutMs: 120_000,
  });
const on = await start('on');
const off = await start('off');
const unbatched = UNBATCHED ? await start('unbatched') : null;
const auth = { authorization: `Bearer ${account.apiKey}` };
const P = `/api/projects/${account.projectId}/persons`;
const logged = async () =>
  Number(
    (await pool.query('select count(*) from person_access_log where project_id = $1', [account.projectId])).rows[0]
      .count,
  );

type Server = Awaited<ReturnType<typeof startServerProcess>>;
const sides = (name: string, server: Server, path: (i: number) => string): PairSide => ({
  name,
  serverPid: server.child.pid,
  request: (i) => getOk(`${server.baseUrl}${path(i)}`, auth),
});
const byId = (i: number) => `${P}/${uuids[(i * 7919) % uuids.length]}/`;
const list = (i: number) => `${P}/?limit=100&offset=${(i % 10) * 100}`;

const ratios: Record<string, number> = {};
try {
  for (const [what, path] of [
    ['GET person by id', byId],
    ['GET persons (a page of 100)', list],
  ] as const) {
    if ((ONLY === 'byid' && path !== byId) || (ONLY === 'list' && path !== list)) continue;
    const before = await logged();
    const result = await interleavedPairs({
      a: sides('recording', on, path),
      b: sides('not recording', off, path),
      concurrency: CONCURRENCY,
      meterPool: pool,
    });
    const rows = (await logged()) - before;
    printPairs(what, { a: sides('recording', on, path), b: sides('not recording', off, path) }, result);
    const requests = result.a.reduce((sum, w) => sum + w.n, 0) + 200; // + warmup
    console.log(`    rows recorded: ${rows} for ${requests} recording requests (one each)`);
    if (rows !== requests) throw new Error(`expected ${requests} rows, found ${rows}`);
    ratios[what] = result.median.ratio;
    if (unbatched) {
      const plain = await interleavedPairs({
        a: sides('one INSERT per request', unbatched, path),
        b: sides('not recording', off, path),
        concurrency: CONCURRENCY,
        meterPool: pool,
      });
      printPairs(
        `${what}, without the group commit`,
        { a: sides('one INSERT per request', unbatched, path), b: sides('not recording', off, path) },
        plain,
      );
      ratios[`${what}, one INSERT per request`] = plain.median.ratio;
    }
  }
} finally {
  await Promise.all([on.stop(), off.stop(), unbatched?.stop()]);
  await pool.end();
  await orm.close();
}
for (const [what, ratio] of Object.entries(ratios)) {
  const gated = !what.includes('one INSERT');
  console.log(
    `  ${what}: recording ÷ not recording ${ratio.toFixed(2)}×${gated ? ` (target ≥ ${TARGET}×: ${ratio >= TARGET ? 'met' : 'MISSED'})` : ''}`,
  );
}
console.log(
  `  load average ${loadAverage()} at the end: absolute rates reflect the sharing, the pairs' ratios less so`,
);
