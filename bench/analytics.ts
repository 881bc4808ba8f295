// Person analytics at volume: BENCH_EVENTS (10,000,000; BENCH_EVENTS=1000000 for a quick run) events
// of BENCH_PERSONS (200,000) persons over 90 days from bench/generate.ts, made once and reused by later
// runs (keyed by a marker row: same sizes, same generator version). Each endpoint (funnel GET and POST,
// correlation, lifecycle, properties timeline, cohorts) through the API process beside the best single
// SQL statement for the same answer, run alternately in the same run: `operation | API s | best SQL s | ratio`.
import { createKey } from '../test/helpers.ts';
import { generateEvents } from './generate.ts';
import { benchSetup, startApiProcess, withoutEventIndexes } from './harness.ts';
import { timed } from './stats.ts';

const EVENTS = Number(process.env.BENCH_EVENTS ?? 10_000_000);
const PERSONS = Number(process.env.BENCH_PERSONS ?? 200_000);
const DAYS = 90;
// Bump when bench/generate.ts makes different data, so an older set is not reused.
const GENERATOR_VERSION = 1;
const MARKER = `analytics events=${EVENTS} persons=${PERSONS} days=${DAYS} v${GENERATOR_VERSION}`;

const { orm, account, pool } = await benchSetup();

/** The project holding the data set (generated now unless a finished one is recorded), a key for it, its end. */
async function dataset(): Promise<{ projectId: number; apiKey: string; end: Date }> {
  await pool.query(`create table if not exists bench_dataset (
    marker text primary key, project_id int not null, user_id int not null, end_at timestamptz not null)`);
  const found = await pool.query(`select project_id, user_id, end_at from bench_dataset where marker = $1`, [MARKER]);
  if (found.rowCount) {
    const { project_id, user_id, end_at } = found.rows[0];
    console.log(`analytics: reusing project ${project_id} (${MARKER})`);
    return { projectId: project_id, apiKey: await createKey(orm, user_id), end: new Date(end_at) };
  }
  const end = new Date();
  console.log(`analytics: generating ${MARKER} into project ${account.projectId}…`);
  const r = await withoutEventIndexes(pool, () =>
    generateEvents(pool, {
      projectId: account.projectId,
      events: EVENTS,
      persons: PERSONS,
      days: DAYS,
      flagKey: 'bench-experiment',
      end,
    }),
  );
  console.log(`  generated in ${r.seconds.toFixed(0)} s (${Math.round(r.events / r.seconds)} events/s)`);
  await pool.query('vacuum analyze event');
  // Recorded only once complete, so an interrupted run is not reused.
  await pool.query(`insert into bench_dataset values ($1, $2, $3, $4)`, [
    MARKER,
    account.projectId,
    account.userId,
    end,
  ]);
  return { projectId: account.projectId, apiKey: account.apiKey, end };
}

const data = await dataset();
const pid = data.projectId;
const DAY = 86400_000;
const dayOf = (t: number) => new Date(t).toISOString().slice(0, 10);
// The last 30 days of the set; lifecycle on the day before its last.
const from = new Date(data.end.getTime() - 30 * DAY).toISOString();
const to = data.end.toISOString();
const lifecycleDay = dayOf(data.end.getTime() - 2 * DAY);
const heavy = (
  await pool.query(`select person_id from person_distinct_id where project_id = $1 and distinct_id = 'u0'`, [pid])
).rows[0].person_id as string;
const heavyUuid = (await pool.query(`select uuid from person where id = $1`, [heavy])).rows[0].uuid as string;

// Cohorts to check a person against: static, by person property, behavioral (purchased in the 30 days).
await pool.query(`delete from cohort where project_id = $1`, [pid]);
const cohortIds: number[] = [];
for (const [name, isStatic, filters] of [
  ['static', true, null],
  ['pro', false, { properties: { type: 'AND', values: [{ key: 'plan', value: 'pro', type: 'person' }] } }],
  [
    'buyers',
    false,
    {
      properties: {
        type: 'OR',
        values: [
          {
            type: 'behavioral',
            value: 'performed_event',
            key: 'purchase',
            event_type: 'events',
            explicit_datetime: from,
          },
        ],
      },
    },
  ],
] as const) {
  const { rows } = await pool.query(
    `insert into cohort (project_id, name, is_static, filters, count) values ($1, $2, $3, $4::jsonb, 0) returning id`,
    [pid, name, isStatic, JSON.stringify(filters)],
  );
  cohortIds.push(rows[0].id);
}
await pool.query(`insert into cohort_person (cohort_id, person_id) values ($1, $2)`, [cohortIds[0], heavy]);

// ---- the best single statement for each answer ----
// Persons (newest first, with their distinct ids) of the id set `ids` (a CTE with person_id), and its count.
const PAGE = `select (select count(*) from ids)::int as count, p.*,
    array(select distinct_id from person_distinct_id d where d.person_id = p.id order by d.id) as distinct_ids
  from person p where p.project_id = $1 and p.id in (select person_id from ids)
  order by p.created_at desc, p.id desc limit 100`;
/** Funnel levels of steps with distinct event names ($2 from, $3 to, then the names); `extra` flags another event. */
const levels = (steps: number, extra: string | null) => {
  const names = Array.from({ length: steps }, (_, i) => `$${i + 4}`);
  const w = 'window w as (partition by person_id order by t, s rows between unbounded preceding and 1 preceding)';
  const reach = (k: number) => `s = ${k} and t <= l${k - 1} + interval '14 days'`;
  const ctes = [
    `ev as (select d.person_id, e.timestamp as t,
       case e.event ${names.map((n, i) => `when ${n} then ${i + 1}`).join(' ')} else 0 end as s
       ${extra ? `, e.event = ${extra} as x` : ', false as x'}
       from event e join person_distinct_id d on d.project_id = e.project_id and d.distinct_id = e.distinct_id
      where e.project_id = $1 and e.event in (${[...names, ...(extra ? [extra] : [])].join(', ')})
        and e.timestamp >= $2 and e.timestamp < $3)`,
    `q1 as (select *, max(case when s = 1 then t end) over w as l1 from ev ${w})`,
  ];
  for (let k = 2; k < steps; k++)
    ctes.push(`q${k} as (select *, max(case when ${reach(k)} then l${k - 1} end) over w as l${k} from q${k - 1} ${w})`);
  const cases = Array.from({ length: steps - 1 }, (_, i) => `when ${reach(steps - i)} then ${steps - i}`).join(' ');
  ctes.push(`lv as (select person_id, max(case ${cases} when s = 1 then 1 else 0 end) as level, bool_or(x) as x
    from q${steps - 1} group by person_id)`);
  return ctes.join(',\n');
};
const funnelSql = `with ${levels(3, null)}, ids as (select person_id from lv where level >= 2) ${PAGE}`;
const funnelDropSql = `with ${levels(3, null)}, ids as (select person_id from lv where level = 2) ${PAGE}`;
const correlationSql = `with ${levels(2, '$6')}, ids as (select person_id from lv where x and level = 1) ${PAGE}`;
const lifecycleSql = `with a as (
    select d.person_id, bool_or(e.timestamp >= $2) as today, bool_or(e.timestamp < $2) as yesterday
      from event e join person_distinct_id d on d.project_id = e.project_id and d.distinct_id = e.distinct_id
     where e.project_id = $1 and e.timestamp >= $2::timestamptz - interval '1 day' and e.timestamp < $3
     group by d.person_id),
  ids as (select a.person_id from a join person p on p.id = a.person_id
           where a.today and a.yesterday and p.created_at < $2) ${PAGE}`;
const timelineSql = `select e.event, e.properties, e.timestamp from event e
  where e.project_id = $1 and e.distinct_id in (select distinct_id from person_distinct_id where person_id = $2)
  order by e.timestamp limit 10000`;
const cohortsSql = `select c.id, c.name, c.count from cohort c where c.project_id = $1 and not c.deleted and case c.id
    when $3 then exists (select 1 from cohort_person cp where cp.cohort_id = c.id and cp.person_id = $2)
    when $4 then exists (select 1 from person p where p.id = $2 and p.properties @> '{"plan":"pro"}')
    when $5 then exists (select 1 from person_distinct_id d
                  join event e on e.project_id = d.project_id and e.distinct_id = d.distinct_id
                  where d.person_id = $2 and e.event = 'purchase' and e.timestamp >= $6)
    end order by c.id`;

interface Operation {
  name: string;
  api: () => { method: 'GET' | 'POST'; path: string; body?: unknown };
  sql: [string, unknown[]];
  /** The figure both answers must agree on. */
  check: (apiBody: any, sqlRows: any[]) => [number, number];
}
const P = `/api/projects/${pid}/persons`;
const steps = (names: string[]) => encodeURIComponent(JSON.stringify(names.map((id, order) => ({ id, order }))));
const range = `date_from=${encodeURIComponent(from)}&date_to=${encodeURIComponent(to)}`;
const persons = (body: any, rows: any[]): [number, number] => [body.results[0].count, rows[0]?.count ?? 0];
const operations: Operation[] = [
  {
    name: 'funnel GET (3 steps, 30 days)',
    api: () => ({
      method: 'GET',
      path: `${P}/funnel/?events=${steps(['signup', 'cart', 'purchase'])}&${range}&funnel_step=2`,
    }),
    sql: [funnelSql, [pid, from, to, 'signup', 'cart', 'purchase']],
    check: persons,
  },
  {
    name: 'funnel POST (drop-off at 3)',
    api: () => ({
      method: 'POST',
      path: `${P}/funnel/`,
      body: {
        events: [{ id: 'signup' }, { id: 'cart' }, { id: 'purchase' }],
        date_from: from,
        date_to: to,
        funnel_step: -3,
      },
    }),
    sql: [funnelDropSql, [pid, from, to, 'signup', 'cart', 'purchase']],
    check: persons,
  },
  {
    name: 'correlation (2 steps)',
    api: () => ({
      method: 'GET',
      path:
        `${P}/funnel/correlation/?events=${steps(['cart', 'purchase'])}&${range}` +
        `&funnel_correlation_person_entity=${encodeURIComponent('{"id":"$identify"}')}` +
        '&funnel_correlation_person_converted=false',
    }),
    sql: [correlationSql, [pid, from, to, 'cart', 'purchase', '$identify']],
    check: persons,
  },
  {
    name: 'lifecycle (returning, all events)',
    api: () => ({ method: 'GET', path: `${P}/lifecycle/?target_date=${lifecycleDay}&lifecycle_type=returning` }),
    sql: [lifecycleSql, [pid, `${lifecycleDay}T00:00:00Z`, new Date(Date.parse(lifecycleDay) + DAY).toISOString()]],
    check: persons,
  },
  {
    name: 'properties timeline (u0)',
    api: () => ({ method: 'GET', path: `${P}/${heavyUuid}/properties_timeline/` }),
    sql: [timelineSql, [pid, heavy]],
    check: (body, rows) => [body.points.reduce((n: number, p: any) => n + p.relevant_event_count, 0), rows.length],
  },
  {
    name: 'cohorts (u0, 3 cohorts)',
    api: () => ({ method: 'GET', path: `${P}/cohorts/?person_id=${heavyUuid}` }),
    sql: [cohortsSql, [pid, heavy, ...cohortIds, from]],
    check: (body, rows) => [body.results.length, rows.length],
  },
];

const REPEAT = Number(process.env.BENCH_REPEAT ?? 3);
const api = await startApiProcess();
const auth = { authorization: `Bearer ${data.apiKey}` };
async function callApi(op: Operation) {
  const { method, path, body } = op.api();
  const res = await fetch(api.baseUrl + path, {
    method,
    headers: { ...auth, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const answer = await res.json();
  if (res.status !== 200) throw new Error(`${op.name}: ${res.status} ${JSON.stringify(answer).slice(0, 300)}`);
  return answer;
}
/** The statement with the service's settings: its own transaction, work_mem 64MB. */
async function callSql(op: Operation) {
  const client = await pool.connect();
  try {
    await client.query(`begin`);
    await client.query(`set local work_mem = '64MB'`);
    const { rows } = await client.query(...op.sql);
    await client.query(`commit`);
    return rows;
  } finally {
    client.release();
  }
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

console.log(`\n${'operation'.padEnd(36)} | API s  | best SQL s | ratio | count API/SQL`);
for (const op of operations) {
  // One untimed call each warms the cache; then alternately, REPEAT times.
  let apiBody = await callApi(op);
  let sqlRows = await callSql(op);
  const apiTimes: number[] = [];
  const sqlTimes: number[] = [];
  for (let i = 0; i < REPEAT; i++) {
    apiTimes.push(await timed(async () => (apiBody = await callApi(op))));
    sqlTimes.push(await timed(async () => (sqlRows = await callSql(op))));
  }
  const [a, s] = [median(apiTimes) / 1000, median(sqlTimes) / 1000];
  const [na, ns] = op.check(apiBody, sqlRows);
  const figures = `${a.toFixed(2).padStart(6)} | ${s.toFixed(2).padStart(10)} | ${(a / s).toFixed(2).padStart(5)}`;
  console.log(`${op.name.padEnd(36)} | ${figures} | ${na}/${ns}${na === ns ? '' : '  MISMATCH'}`);
}

await pool.query(`delete from cohort_person where cohort_id in (select id from cohort where project_id = $1)`, [pid]);
await pool.query(`delete from cohort where project_id = $1`, [pid]);
await api.stop();
await pool.end();
await orm.close();
