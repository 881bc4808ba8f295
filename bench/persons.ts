// Person reads at scale: a project with BENCH_PERSONS (1,000,000) persons; GET by id, list with an
// email filter, list with a properties filter, search, and bulk_delete of 1000 — p50/p99 over HTTP
// beside the same query as raw SQL through pg, in the same run.
import { benchSetup, getOk, startApiProcess, startBareKoaProcess } from './harness.ts';
import { percentile, progress, timed } from './stats.ts';

const N = Number(process.env.BENCH_PERSONS ?? 1_000_000);
const SAMPLES = Number(process.env.BENCH_SAMPLES ?? 200);

const { orm, account, pool } = await benchSetup();
const api = await startApiProcess();
const bare = await startBareKoaProcess();
const pid = account.projectId;

console.log(`persons: generating ${N} persons…`);
for (let start = 0; start < N; start += 100_000) {
  const end = Math.min(N, start + 100_000);
  await pool.query(
    `insert into person (uuid, project_id, properties, created_at)
     select gen_random_uuid(), $1, jsonb_build_object('email', 'user' || g || '@example' || (g % 100) || '.com', 'plan', case when g % 7 = 0 then 'pro' else 'free' end, 'age', g % 90),
            now() - make_interval(secs => g)
       from generate_series($2::int, $3::int - 1) g`,
    [pid, start, end],
  );
  await pool.query(
    `insert into person_distinct_id (project_id, person_id, distinct_id)
     select $1, id, 'd-' || (properties->>'email') from person where project_id = $1 and id > coalesce((select max(person_id) from person_distinct_id where project_id = $1), 0)`,
    [pid],
  );
  progress(`  ${end} persons`);
}
await pool.query('analyze person; analyze person_distinct_id');
console.log('');

const auth = { authorization: `Bearer ${account.apiKey}` };
/** p50/p99 of the API beside raw SQL and, when `bareUrl` is given, beside a bare Koa handler running that SQL. */
async function compare(
  name: string,
  http: (i: number) => string,
  sql: (i: number) => [string, unknown[]],
  bareUrl?: (i: number) => string,
) {
  const httpTimes: number[] = [];
  const sqlTimes: number[] = [];
  const bareTimes: number[] = [];
  for (let i = 0; i < SAMPLES; i++) {
    sqlTimes.push(await timed(() => pool.query(...sql(i))));
    if (bareUrl) bareTimes.push(await timed(() => getOk(bare.baseUrl + bareUrl(i))));
    httpTimes.push(await timed(() => getOk(api.baseUrl + http(i), auth)));
  }
  const h50 = percentile(httpTimes, 50);
  const s50 = percentile(sqlTimes, 50);
  const bareFigures = bareUrl
    ? ` | bare Koa + pg p50 ${percentile(bareTimes, 50).toFixed(2)} ms p99 ${percentile(bareTimes, 99).toFixed(2)} ms, API/bare p50 ${(h50 / percentile(bareTimes, 50)).toFixed(1)}x`
    : '';
  console.log(
    `  ${name.padEnd(24)} HTTP p50 ${h50.toFixed(2)} ms p99 ${percentile(httpTimes, 99).toFixed(2)} ms | raw SQL p50 ${s50.toFixed(2)} ms p99 ${percentile(sqlTimes, 99).toFixed(2)} ms | p50 ratio ${(h50 / s50).toFixed(1)}x${bareFigures}`,
  );
}

const ids = (
  await pool.query(`select id from person where project_id = $1 order by random() limit $2`, [pid, SAMPLES])
).rows.map((r) => r.id);
const P = `/api/projects/${pid}/persons`;
// Every baseline fetches what the API returns: the person rows with their distinct ids.
const WITH_IDS = `select p.*, array(select distinct_id from person_distinct_id d where d.person_id = p.id) as distinct_ids`;
await compare(
  'GET by id',
  (i) => `${P}/${ids[i]}/`,
  (i) => [`${WITH_IDS} from person p where project_id = $1 and id = $2`, [pid, ids[i]]],
  (i) => `/projects/${pid}/persons/${ids[i]}/`,
);
await compare(
  'list, email filter',
  (i) => `${P}/?email=user${i * 997}@example${(i * 997) % 100}.com`,
  (i) => [
    `${WITH_IDS} from person p where project_id = $1 and properties @> $2::jsonb order by created_at desc, id desc limit 100`,
    [pid, JSON.stringify({ email: `user${i * 997}@example${(i * 997) % 100}.com` })],
  ],
);
await compare(
  'list, properties filter',
  () => `${P}/?limit=100&properties=${encodeURIComponent('[{"key":"plan","value":"pro"}]')}`,
  () => [
    `${WITH_IDS} from person p where project_id = $1 and properties @> '{"plan":"pro"}' order by created_at desc, id desc limit 100`,
    [pid],
  ],
);
await compare(
  'search',
  (i) => `${P}/?search=user${i * 991}@`,
  (i) => [
    `${WITH_IDS} from person p where project_id = $1 and (properties->>'email') ilike $2 order by created_at desc, id desc limit 100`,
    [pid, `%user${i * 991}@%`],
  ],
);

const victims = (
  await pool.query(`select uuid from person where project_id = $1 order by random() limit 1000`, [pid])
).rows.map((r) => r.uuid);
const ms = await timed(async () => {
  const res = await fetch(`${api.baseUrl}${P}/bulk_delete/`, {
    method: 'POST',
    headers: { ...auth, 'content-type': 'application/json' },
    body: JSON.stringify({ ids: victims, delete_events: true }),
  });
  const body = await res.json();
  if (body.persons_deleted !== 1000) throw new Error(JSON.stringify(body).slice(0, 200));
});
console.log(`  bulk_delete of 1000 persons (with delete_events): ${ms.toFixed(0)} ms (target < 1000 ms)`);

await pool.query(`delete from person where project_id = $1`, [pid]);
await api.stop();
await bare.stop();
await pool.end();
await orm.close();
