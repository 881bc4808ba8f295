// Person reads at scale: a project with BENCH_PERSONS (1,000,000) persons and a small one with
// BENCH_SMALL_PERSONS (100,000) sharing the table. Measured, each beside its baseline in the same run:
//   - GET by id, list filters, search: p50/p99 over HTTP beside the same query as raw SQL through pg;
//     GET by id also beside Koa + @koa/router running that SQL (the card's stack with nothing of ours),
//     sequentially, and at 16 clients in interleaved pairs of windows (bench/harness.ts interleavedPairs).
//   - search in the small project (it must cost what it would alone, not what the table holds).
//   - every property filter operator, matching and matching nothing: p50/p99 and the plan serving it.
//   - the numeric filters matching nobody (a scan) in interleaved pairs beside the API's page statement through pg.
//   - the numeric and substring filters again once `npm run manage -- property index` has indexed their keys,
//     and what each index kind costs person inserts (with it vs with none, in interleaved pairs).
//   - the CSV export of the whole project beside `psql \copy (select …) to stdout` of the same rows.
//   - bulk_delete of 1000 persons; inserting the small project's persons (what each index costs).
// BENCH_REUSE=1 keeps the generated persons for the next run (their account is kept in a file beside
// this one's database name under /tmp) instead of generating them again.
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import pg from 'pg';
import { createAccount, type TestAccount } from '../test/helpers.ts';
import { rows } from '../shared/platform/db/sql.ts';
import { dropPersonPropertyIndexes, indexPersonProperty, personPropertyIndexes } from '../shared/persons/index.ts';
import { findPerson, personListFilter } from '../shared/persons/index.ts';
import {
  BENCH_DATABASE_URL,
  benchSetup,
  getOk,
  interleavedPairs,
  type PairSide,
  printPairs,
  startApiProcess,
  startKoaRouterProcess,
} from './harness.ts';
import { percentile, progress, timed } from './stats.ts';

const N = Number(process.env.BENCH_PERSONS ?? 1_000_000);
const SMALL = Number(process.env.BENCH_SMALL_PERSONS ?? 100_000);
const SAMPLES = Number(process.env.BENCH_SAMPLES ?? 200);
// Filters: up to this many samples each, but at most FILTER_SECONDS of them (a slow plan takes seconds).
const FILTER_SAMPLES = Number(process.env.BENCH_FILTER_SAMPLES ?? 50);
const FILTER_SECONDS = Number(process.env.BENCH_FILTER_SECONDS ?? 15);
const INSERT_BATCH = Number(process.env.BENCH_INSERT_BATCH ?? 2_000);
const only = process.env.BENCH_ONLY?.split(',') ?? null; // e.g. BENCH_ONLY=get,filters,indexed,search,csv,delete,ingest
const wants = (part: string) => !only || only.includes(part);

const { orm, pool } = await benchSetup();
const reuseFile = `/tmp/bench-persons-${new URL(BENCH_DATABASE_URL).pathname.slice(1)}-${N}-${SMALL}.json`;

/** Inserts persons numbered start..end-1 into the project, with one distinct id each. */
async function insertPersons(projectId: number, start: number, end: number, db: Pick<pg.Pool, 'query'> = pool) {
  await db.query(
    `with made as (
       insert into person (uuid, project_id, properties, created_at)
       select gen_random_uuid(), $1, jsonb_build_object('email', 'user' || g || '@example' || (g % 100) || '.com',
                'plan', case when g % 7 = 0 then 'pro' else 'free' end, 'age', g % 90,
                'signed_up', now() - make_interval(mins => g))
                || case when g % 3 = 0 then jsonb_build_object('name', 'Person ' || g) else '{}' end,
              now() - make_interval(secs => g)
         from generate_series($2::int, $3::int - 1) g
       returning id, properties->>'email' as email)
     insert into person_distinct_id (project_id, person_id, distinct_id) select $1, id, 'd-' || email from made`,
    [projectId, start, end],
  );
}

async function generate(projectId: number, n: number, label: string): Promise<number> {
  const started = performance.now();
  for (let start = 0; start < n; start += 50_000) {
    await insertPersons(projectId, start, Math.min(n, start + 50_000));
    progress(`  ${label}: ${Math.min(n, start + 50_000)} persons`);
  }
  if (!process.stdout.isTTY) console.log('');
  return (performance.now() - started) / 1000;
}

let big: TestAccount;
let small: TestAccount;
let smallInsertSeconds: number | null = null;
const saved = existsSync(reuseFile) ? JSON.parse(readFileSync(reuseFile, 'utf8')) : null;
const countOf = async (projectId: number) =>
  Number((await pool.query(`select count(*) as n from person where project_id = $1`, [projectId])).rows[0].n);
if (process.env.BENCH_REUSE && saved && (await countOf(saved.big.projectId)) === N) {
  ({ big, small } = saved);
  console.log(`persons: reusing ${N} + ${SMALL} persons (projects ${big.projectId}, ${small.projectId})`);
} else {
  big = await createAccount(orm);
  small = await createAccount(orm);
  console.log(`persons: generating ${N} persons…`);
  await generate(big.projectId, N, 'large project');
  // vacuum too: dead rows an earlier run left (deletes, rolled-back inserts) would slow every read.
  await pool.query('vacuum analyze person, person_distinct_id');
  // The small project goes in second, into a table that already holds the large one: its insert time
  // is the ingestion cost of the person indexes at this size.
  smallInsertSeconds = await generate(small.projectId, SMALL, 'small project');
  await pool.query('analyze person; analyze person_distinct_id');
  if (process.env.BENCH_REUSE) writeFileSync(reuseFile, JSON.stringify({ big, small }));
}
if (smallInsertSeconds !== null)
  console.log(`  inserting ${SMALL} persons (+ distinct ids) beside ${N}: ${smallInsertSeconds.toFixed(1)} s`);
const sizes = await pool.query(
  `select indexrelid::regclass::text as name, pg_size_pretty(pg_relation_size(indexrelid)) as size
     from pg_index where indrelid = 'person'::regclass order by 1`,
);
console.log(`  person indexes: ${sizes.rows.map((r) => `${r.name} ${r.size}`).join(', ')}`);

const api = await startApiProcess();
const koaRouter = await startKoaRouterProcess({ BASELINE_PERSON_SQL: await personByIdSqlTemplate() });
const pid = big.projectId;
const auth = (account: TestAccount) => ({ authorization: `Bearer ${account.apiKey}` });
const fmt = (ms: number) => (ms < 10 ? ms.toFixed(2) : ms.toFixed(0));

/** p50/p99 of the API beside raw SQL and, when `koaRouterUrl` is given, beside Koa + @koa/router running that SQL. */
async function compare(
  name: string,
  http: (i: number) => string,
  sql: (i: number) => [string, unknown[]],
  options: { koaRouterUrl?: (i: number) => string; account?: TestAccount; samples?: number } = {},
) {
  const httpTimes: number[] = [];
  const sqlTimes: number[] = [];
  const koaRouterTimes: number[] = [];
  const headers = auth(options.account ?? big);
  for (let i = 0; i < (options.samples ?? SAMPLES); i++) {
    sqlTimes.push(await timed(() => pool.query(...sql(i))));
    if (options.koaRouterUrl)
      koaRouterTimes.push(await timed(() => getOk(koaRouter.baseUrl + options.koaRouterUrl!(i))));
    httpTimes.push(await timed(() => getOk(api.baseUrl + http(i), headers)));
  }
  const h50 = percentile(httpTimes, 50);
  const s50 = percentile(sqlTimes, 50);
  const koaRouterFigures = options.koaRouterUrl
    ? ` | Koa + @koa/router + pg p50 ${fmt(percentile(koaRouterTimes, 50))} ms p99 ${fmt(percentile(koaRouterTimes, 99))} ms, API/baseline p50 ${(h50 / percentile(koaRouterTimes, 50)).toFixed(1)}x`
    : '';
  console.log(
    `  ${name.padEnd(28)} HTTP p50 ${fmt(h50)} ms p99 ${fmt(percentile(httpTimes, 99))} ms | raw SQL p50 ${fmt(s50)} ms p99 ${fmt(percentile(sqlTimes, 99))} ms | p50 ratio ${(h50 / s50).toFixed(1)}x${koaRouterFigures}`,
  );
}

const ids = (
  await pool.query(`select id from person where project_id = $1 order by random() limit $2`, [pid, SAMPLES])
).rows.map((r) => r.id);

/**
 * The statement the API sends for a GET by id (shared/persons/store.ts findPerson, values inlined), caught
 * on its way to pg, with `{project_id}` and `{id}` where the values go: the baseline sends the same text.
 */
async function personByIdSqlTemplate(): Promise<string> {
  const em = orm.em.fork();
  const native = (await em.getConnection().getNativeClient()) as pg.Pool;
  const sent: string[] = [];
  const query = native.query;
  native.query = function (this: pg.Pool, ...args: unknown[]) {
    if (typeof args[0] === 'string') sent.push(args[0]);
    return (query as (...a: unknown[]) => unknown).apply(this, args);
  } as typeof native.query;
  const statementFor = async (projectId: number, id: string) => {
    sent.length = 0;
    await findPerson(em, projectId, { id });
    if (sent.length !== 1) throw new Error(`GET by id: expected one statement, caught ${sent.length}`);
    return sent[0];
  };
  try {
    const template = (await statementFor(987_654_321, '123456789012345'))
      .replace(' = 987654321 ', ' = {project_id} ')
      .replace(`'123456789012345'`, `'{id}'`);
    const check = await statementFor(big.projectId, '42');
    if (template.replace('{project_id}', String(big.projectId)).replace('{id}', '42') !== check)
      throw new Error(`GET by id: the statement template does not give the API's statement:\n${template}\n${check}`);
    return template;
  } finally {
    native.query = query;
  }
}
const P = (account: TestAccount) => `/api/projects/${account.projectId}/persons`;
// Every baseline fetches what the API returns: the person rows with their distinct ids.
const WITH_IDS = `select p.*, array(select d.distinct_id from person_distinct_id d where d.person_id = p.id order by d.id) as distinct_ids`;

if (wants('get')) {
  console.log('GET by id');
  await compare(
    'GET by id',
    (i) => `${P(big)}/${ids[i]}/`,
    (i) => [`${WITH_IDS} from person p where project_id = $1 and id = $2`, [pid, ids[i]]],
    { koaRouterUrl: (i) => `${P(big)}/${ids[i]}/` },
  );
  // Throughput at 16 concurrent clients: the API and the Koa + @koa/router baseline (the same statement
  // through pg) in interleaved pairs of windows, with CPU per request of the server, PostgreSQL and clients.
  const apiSide: PairSide = {
    name: 'API',
    serverPid: api.child.pid,
    request: (i) => getOk(`${api.baseUrl}${P(big)}/${ids[i % ids.length]}/`, auth(big)),
  };
  const koaRouterSide: PairSide = {
    name: 'Koa + @koa/router + pg',
    serverPid: koaRouter.child.pid,
    request: (i) => getOk(`${koaRouter.baseUrl}${P(big)}/${ids[i % ids.length]}/`),
  };
  // Like for like: the baseline must answer with the API's very bytes (it sends the same statement).
  for (const id of ids.slice(0, 20)) {
    const [ours, theirs] = await Promise.all([
      fetch(`${api.baseUrl}${P(big)}/${id}/`, { headers: auth(big) }),
      fetch(`${koaRouter.baseUrl}${P(big)}/${id}/`),
    ]);
    const [a, b] = [Buffer.from(await ours.arrayBuffer()), Buffer.from(await theirs.arrayBuffer())];
    if (
      a.length !== b.length ||
      !a.equals(b) ||
      ours.headers.get('content-type') !== theirs.headers.get('content-type')
    )
      throw new Error(
        `GET by id ${id}: the baseline's answer is not the API's (${b.length} bytes, ${theirs.headers.get('content-type')} vs ${a.length} bytes, ${ours.headers.get('content-type')}):\n${b}\n${a}`,
      );
  }
  const result = await interleavedPairs({ a: apiSide, b: koaRouterSide, concurrency: 16, meterPool: pool });
  printPairs('GET by id, 16 clients (target ≥ 0.8×)', { a: apiSide, b: koaRouterSide }, result);
  console.log(
    `GET person by id ÷ Koa+router+pg: ${result.median.ratio.toFixed(2)}x (target ≥ 0.8×; pairs ${Math.min(...result.ratios).toFixed(2)}–${Math.max(...result.ratios).toFixed(2)}×) load ${os.loadavg()[0].toFixed(1)}` +
      ` | server CPU per request ${(result.median.a.cpu.server * 1000).toFixed(0)} µs vs ${(result.median.b.cpu.server * 1000).toFixed(0)} µs`,
  );
}

if (wants('search')) {
  console.log('list filters and search');
  await compare(
    'list, email filter',
    (i) => `${P(big)}/?email=user${i * 997}@example${(i * 997) % 100}.com`,
    (i) => [
      `${WITH_IDS} from person p where project_id = $1 and properties @> $2::jsonb order by created_at desc, id desc limit 100`,
      [pid, JSON.stringify({ email: `user${i * 997}@example${(i * 997) % 100}.com` })],
    ],
  );
  const searchSql = (account: TestAccount, term: string): [string, unknown[]] => [
    `${WITH_IDS} from person p where project_id = $1 and (properties->>'email') ilike $2 order by created_at desc, id desc limit 100`,
    [account.projectId, `%${term}%`],
  ];
  // A selective term (one person) and a broad one (11% of a project: example7, example70…79).
  for (const [label, account] of [
    ['large', big],
    ['small', small],
  ] as const) {
    const n = label === 'large' ? N : SMALL;
    await compare(
      `search ${label}, one match`,
      (i) => `${P(account)}/?search=user${(i * 991) % n}@`,
      (i) => searchSql(account, `user${(i * 991) % n}@`),
      { account, samples: Math.min(SAMPLES, 50) },
    );
    await compare(
      `search ${label}, 11% match`,
      () => `${P(account)}/?search=example7`,
      () => searchSql(account, 'example7'),
      { account, samples: Math.min(SAMPLES, 20) },
    );
  }
  await explainList('search small, one match', small, { search: 'user4321@' });
  await explainList('search small, 11% match', small, { search: 'example7' });
}

/** The plan of the list's page query for these parameters: node types and the indexes they read. */
async function explainList(name: string, account: TestAccount, query: Record<string, unknown>) {
  const em = orm.em.fork();
  const filter = await personListFilter(em, account.projectId, query);
  const [row] = await rows<{ 'QUERY PLAN': { Plan: PlanNode }[] }>(
    em,
    `explain (format json) select p.* from person p where ${filter.sql} order by p.created_at desc, p.id desc limit 101`,
    filter.params,
  );
  console.log(`    plan of ${name}: ${planSummary(row['QUERY PLAN'][0].Plan)}`);
}

interface PlanNode {
  'Node Type': string;
  'Index Name'?: string;
  'Relation Name'?: string;
  Plans?: PlanNode[];
}
function planSummary(node: PlanNode): string {
  const self = `${node['Node Type']}${node['Index Name'] ? `[${node['Index Name']}]` : ''}`;
  const children = (node.Plans ?? []).map(planSummary);
  return children.length ? `${self}(${children.join(', ')})` : self;
}

// The date filters, measured without and with a date index on signed_up (each person signed up g minutes ago).
const DAY = 86_400_000;
const daysAgo = (days: number) => new Date(Date.now() - days * DAY).toISOString();
const DATE_FILTERS: [string, unknown[], unknown[]][] = [
  [
    'is_date_before',
    [{ key: 'signed_up', value: daysAgo(30), operator: 'is_date_before' }],
    [{ key: 'signed_up', value: '2000-01-01', operator: 'is_date_before' }],
  ],
  [
    'is_date_after',
    [{ key: 'signed_up', value: daysAgo(30), operator: 'is_date_after' }],
    [{ key: 'signed_up', value: daysAgo(-1), operator: 'is_date_after' }],
  ],
  [
    'is_date_exact',
    [{ key: 'signed_up', value: daysAgo(2).slice(0, 10), operator: 'is_date_exact' }],
    [{ key: 'signed_up', value: '2000-01-01', operator: 'is_date_exact' }],
  ],
];

// The numeric filters on a property no index serves, matching nobody: the list reads every person of the
// project. Measured one client at a time over HTTP, in interleaved pairs of windows beside the API's own
// page statement (personListFilter + the list's query, values inlined as the API sends them) through pg.
const NUMERIC_NONE: [string, unknown[]][] = [
  ['gt', [{ key: 'age', value: 1000, operator: 'gt' }]],
  ['lt', [{ key: 'age', value: -1, operator: 'lt' }]],
];
const loadPool = new pg.Pool({ connectionString: BENCH_DATABASE_URL, max: 16 });
async function numericPairs(operator: string, filter: unknown[]) {
  const em = orm.em.fork();
  const where = await personListFilter(em, big.projectId, { properties: filter });
  const statement = em.getPlatform().formatQuery(
    `select q.id::text as id, q.uuid, q.properties, q.is_identified, q.created_at,
            array(select d.distinct_id from person_distinct_id d where d.person_id = q.id order by d.id) as distinct_ids
       from (select p.* from person p where ${where.sql} order by p.created_at desc, p.id desc limit 101) q
      order by q.created_at desc, q.id desc`,
    where.params as unknown[],
  );
  const url = `${api.baseUrl}${P(big)}/?limit=100&properties=${encodeURIComponent(JSON.stringify(filter))}`;
  const a: PairSide = { name: 'API', serverPid: api.child.pid, warmup: 2, request: () => getOk(url, auth(big)) };
  const b: PairSide = {
    name: 'the page statement through pg',
    warmup: 2,
    request: async () => {
      const { rows: found } = await loadPool.query(statement);
      if (found.length) throw new Error(`${operator}: expected no match, got ${found.length}`);
    },
  };
  const result = await interleavedPairs({ a, b, concurrency: 1, meterPool: pool });
  printPairs(`${operator}, no match, unindexed, 1 client (target p99 < 500 ms)`, { a, b }, result);
}

if (wants('filters')) {
  // Each operator matching some persons and matching none. Cohorts: a dynamic one (plan = pro), one
  // matching nobody (plan = enterprise) and a static one with 10,000 members.
  const cohort = async (filters: unknown, isStatic = false) =>
    (
      await pool.query(
        `insert into cohort (project_id, name, filters, is_static) values ($1, $2, $3, $4) returning id`,
        [pid, `bench ${Math.random()}`, filters, isStatic],
      )
    ).rows[0].id;
  const proCohort = await cohort({ properties: { type: 'AND', values: [{ key: 'plan', value: 'pro' }] } });
  const noneCohort = await cohort({ properties: { type: 'AND', values: [{ key: 'plan', value: 'enterprise' }] } });
  const staticCohort = await cohort(null, true);
  await pool.query(
    `insert into cohort_person (cohort_id, person_id)
     select $1, id from person where project_id = $2 order by id limit 10000`,
    [staticCohort, pid],
  );
  const filters: [string, unknown[], unknown[]][] = [
    ['exact', [{ key: 'plan', value: 'pro' }], [{ key: 'plan', value: 'enterprise' }]],
    [
      'is_not',
      [{ key: 'plan', value: 'free', operator: 'is_not' }],
      [{ key: 'plan', value: ['free', 'pro'], operator: 'is_not' }],
    ],
    [
      'icontains',
      [{ key: 'email', value: 'example7', operator: 'icontains' }],
      [{ key: 'email', value: 'nobody-here', operator: 'icontains' }],
    ],
    [
      'regex',
      [{ key: 'email', value: '^user1[0-9]*@', operator: 'regex' }],
      [{ key: 'email', value: '^nobody', operator: 'regex' }],
    ],
    // gt and lt matching nobody (a scan) are measured in interleaved pairs below.
    ['gt', [{ key: 'age', value: 80, operator: 'gt' }], []],
    ['lt', [{ key: 'age', value: 5, operator: 'lt' }], []],
    ['is_set', [{ key: 'name', operator: 'is_set' }], [{ key: 'nokey', operator: 'is_set' }]],
    ['is_not_set', [{ key: 'name', operator: 'is_not_set' }], [{ key: 'email', operator: 'is_not_set' }]],
    ...DATE_FILTERS,
    ['cohort', [{ key: 'id', value: proCohort, type: 'cohort' }], [{ key: 'id', value: noneCohort, type: 'cohort' }]],
    ['static cohort', [{ key: 'id', value: staticCohort, type: 'cohort' }], []],
  ];
  console.log(`property filters at ${N} persons (p50/p99 over HTTP, limit 100; target p99 < 500 ms)`);
  for (const [operator, matching, none] of filters) await measureFilters(operator, matching, none);
  for (const [operator, none] of NUMERIC_NONE) await numericPairs(operator, none);
  await pool.query(`delete from cohort where id in ($1, $2, $3)`, [proCohort, noneCohort, staticCohort]);
}

/** p50/p99 of the list with `matching` and with `none` (a filter matching nobody), and each plan. */
async function measureFilters(operator: string, matching: unknown[], none: unknown[]) {
  for (const [kind, filter] of [
    ['match', matching],
    ['no match', none],
  ] as const) {
    if (!filter.length) continue;
    const url = `${api.baseUrl}${P(big)}/?limit=100&properties=${encodeURIComponent(JSON.stringify(filter))}`;
    await getOk(url, auth(big)); // warm-up
    const times: number[] = [];
    const deadline = performance.now() + FILTER_SECONDS * 1000;
    while (times.length < FILTER_SAMPLES && (times.length < 3 || performance.now() < deadline))
      times.push(await timed(() => getOk(url, auth(big))));
    console.log(
      `  ${`${operator}, ${kind}`.padEnd(26)} p50 ${fmt(percentile(times, 50)).padStart(5)} ms p99 ${fmt(percentile(times, 99)).padStart(5)} ms (n=${times.length})`,
    );
    await explainList(`${operator}, ${kind}`, big, { properties: filter });
  }
}

if (wants('indexed')) {
  // The same numeric and substring filters once an operator has indexed the properties they read
  // (`npm run manage -- property index`): build time, size, what they cost person inserts, p50/p99.
  const em = orm.em.fork();
  const buildNumber = await timed(() => indexPersonProperty(em, 'age', ['number']));
  const buildText = await timed(() => indexPersonProperty(em, 'plan', ['text']));
  const buildDate = await timed(() => indexPersonProperty(em, 'signed_up', ['date'])); // includes its ANALYZE
  await pool.query('analyze person');
  const built = (await personPropertyIndexes(em)).filter((index) => ['age', 'plan', 'signed_up'].includes(index.key));
  const sizes = built.map((index) => `${index.kind} on ${index.key} ${(index.bytes / 1e6).toFixed(0)} MB`);
  console.log(
    `property indexes: number on age built in ${(buildNumber / 1000).toFixed(1)} s, text on plan in ${(buildText / 1000).toFixed(1)} s, date on signed_up in ${(buildDate / 1000).toFixed(1)} s (${sizes.join(', ')})`,
  );
  // What each kind costs person inserts: batches of INSERT_BATCH persons (+ distinct ids) into a project of
  // their own, each in a transaction rolled back, with that kind's index and with no property index, in
  // interleaved pairs. Both sides drop the indexes they go without inside the transaction (rolled back
  // too): one drop more on the side without, a few ms against a batch.
  const scratch = await createAccount(orm);
  const insertBatch = (drop: string[]) => async (i: number) => {
    const client = await pool.connect();
    try {
      await client.query('begin');
      for (const name of drop) await client.query(`drop index ${name}`);
      await insertPersons(scratch.projectId, i * INSERT_BATCH, (i + 1) * INSERT_BATCH, client);
    } finally {
      await client.query('rollback');
      client.release();
    }
  };
  const none: PairSide = {
    name: 'no property index',
    warmup: 2,
    request: insertBatch(built.map((index) => index.name)),
  };
  for (const kind of ['number', 'text', 'date'] as const) {
    await pool.query('vacuum person, person_distinct_id'); // the previous comparison's rolled-back rows
    const others = built.filter((index) => index.kind !== kind).map((index) => index.name);
    const withKind: PairSide = { name: `${kind} index`, warmup: 2, request: insertBatch(others) };
    const result = await interleavedPairs({ a: withKind, b: none, concurrency: 1, meterPool: pool });
    printPairs(
      `inserting ${INSERT_BATCH} persons per transaction, ${kind} index vs none`,
      { a: withKind, b: none },
      result,
    );
    const perPerson = (rate: number) => (1e6 / rate / INSERT_BATCH).toFixed(0);
    const more = (ratio: number) => `${ratio <= 1 ? '+' : ''}${((1 / ratio - 1) * 100).toFixed(0)}%`;
    const m = result.median;
    console.log(
      `    time per person (medians): ${perPerson(m.a.rate)} µs with the ${kind} index, ${perPerson(m.b.rate)} µs without; ` +
        `time with it per pair ${result.ratios.map(more).join(', ')} (median ${more(m.ratio)}); ` +
        `CPU per person ${more(m.b.cpu.total / m.a.cpu.total)}`,
    );
  }
  await pool.query('vacuum analyze person, person_distinct_id');
  await measureFilters(
    'gt (indexed)',
    [{ key: 'age', value: 80, operator: 'gt' }],
    [{ key: 'age', value: 1000, operator: 'gt' }],
  );
  await measureFilters(
    'lt (indexed)',
    [{ key: 'age', value: 5, operator: 'lt' }],
    [{ key: 'age', value: -1, operator: 'lt' }],
  );
  await measureFilters(
    'between (indexed)',
    [{ key: 'age', value: [10, 12], operator: 'between' }],
    [{ key: 'age', value: [500, 600], operator: 'between' }],
  );
  await measureFilters(
    'icontains (indexed)',
    [{ key: 'plan', value: 'pro', operator: 'icontains' }],
    [{ key: 'plan', value: 'enterprise', operator: 'icontains' }],
  );
  for (const [operator, matching, none] of DATE_FILTERS) await measureFilters(`${operator} (indexed)`, matching, none);
  await dropPersonPropertyIndexes(em, 'age');
  await dropPersonPropertyIndexes(em, 'plan');
  await dropPersonPropertyIndexes(em, 'signed_up');
}

if (wants('csv')) {
  // The CSV export of the whole large project beside psql's \copy of the same rows in the same order.
  const csv = await new Promise<{ firstByte: number; total: number; lines: number }>((resolve, reject) => {
    const started = performance.now();
    let firstByte = 0;
    let lines = 0;
    http
      .get(`${api.baseUrl}${P(big)}/?format=csv`, { headers: auth(big) }, (res) => {
        if (res.statusCode !== 200) reject(new Error(`CSV export answered ${res.statusCode}`));
        res.on('data', (chunk: Buffer) => {
          if (!firstByte) firstByte = performance.now() - started;
          for (let i = chunk.indexOf(10); i !== -1; i = chunk.indexOf(10, i + 1)) lines++;
        });
        res.on('end', () => resolve({ firstByte, total: performance.now() - started, lines }));
      })
      .on('error', reject);
  });
  const copyMs = await timed(async () => {
    execFileSync(
      'psql',
      [
        BENCH_DATABASE_URL,
        '-qc',
        `\\copy (select p.id, p.uuid, p.properties, p.is_identified, p.created_at, array(select distinct_id from person_distinct_id d where d.person_id = p.id order by d.id) from person p where project_id = ${pid} order by created_at desc, id desc) to '/dev/null' with csv`,
      ],
      { stdio: 'inherit' },
    );
  });
  // The floor for any export written by Node: the same rows, keyset-paged 5,000 at a time (as the export
  // pages), only fetched and parsed by pg, no CSV written.
  const fetchMs = await timed(async () => {
    let after: { key_at: string; id: string } | null = null;
    for (;;) {
      const page: { rows: { key_at: string; id: string }[] } = await pool.query(
        `select q.id::text as id, q.uuid, q.properties, q.is_identified, q.created_at, q.created_at::text as key_at,
                coalesce((select array_agg(d.distinct_id order by d.id) from person_distinct_id d where d.person_id = q.id), '{}')
           from (select p.* from person p where p.project_id = $1
                 ${after ? 'and (p.created_at, p.id) < ($3::timestamptz, $4::bigint)' : ''}
                 order by p.created_at desc, p.id desc limit $2) q order by q.created_at desc, q.id desc`,
        after ? [pid, 5000, after.key_at, after.id] : [pid, 5000],
      );
      if (page.rows.length < 5000) break;
      after = page.rows[page.rows.length - 1];
    }
  });
  console.log(
    `  CSV export of ${N} persons: ${csv.lines - 1} rows, first byte ${fmt(csv.firstByte)} ms, total ${(csv.total / 1000).toFixed(1)} s | psql \\copy of the same rows ${(copyMs / 1000).toFixed(1)} s | ratio ${(csv.total / copyMs).toFixed(2)}x (target ≤ 2x, first byte < 200 ms)`,
  );
  console.log(
    `  floor: the same rows fetched through pg in the export's pages, no CSV written: ${(fetchMs / 1000).toFixed(1)} s = ${(fetchMs / copyMs).toFixed(2)}x \\copy; the export is ${(csv.total / fetchMs).toFixed(2)}x that fetch`,
  );
}

if (wants('delete')) {
  // 1000 persons added for the purpose, so the large project keeps its size for the next run.
  const victims = (
    await pool.query(
      `with made as (
         insert into person (uuid, project_id, properties) select gen_random_uuid(), $1, '{}' from generate_series(1, 1000)
         returning id, uuid)
       , ids as (insert into person_distinct_id (project_id, person_id, distinct_id)
                 select $1, id, 'victim-' || uuid from made)
       select uuid from made`,
      [pid],
    )
  ).rows.map((r) => r.uuid);
  const ms = await timed(async () => {
    const res = await fetch(`${api.baseUrl}${P(big)}/bulk_delete/`, {
      method: 'POST',
      headers: { ...auth(big), 'content-type': 'application/json' },
      body: JSON.stringify({ ids: victims, delete_events: true }),
    });
    const body = await res.json();
    if (body.persons_deleted !== 1000) throw new Error(JSON.stringify(body).slice(0, 200));
  });
  console.log(`  bulk_delete of 1000 persons (with delete_events): ${ms.toFixed(0)} ms (target < 1000 ms)`);
}

if (wants('ingest')) {
  // What the person indexes cost an insert: 50,000 persons into a new project with every index, and
  // with some dropped, each in a transaction rolled back (so the table stays as it was).
  const account = await createAccount(orm);
  const variants: [string, string[]][] = [
    ['every index', []],
    ['without the trigram indexes', ['drop index person_email_trgm', 'drop index person_name_trgm']],
    ['without person_properties_gin', ['drop index person_properties_gin']],
  ];
  console.log('insert cost of the person indexes (50,000 persons + distinct ids, beside the rest)');
  for (const [name, setup] of variants) {
    const client = await pool.connect();
    try {
      await client.query('begin');
      for (const statement of setup) await client.query(statement);
      const ms = await timed(() => insertPersons(account.projectId, 0, 50_000, client));
      console.log(`  ${name.padEnd(30)} ${(ms / 1000).toFixed(1)} s`);
    } finally {
      await client.query('rollback');
      client.release();
    }
  }
}

if (!process.env.BENCH_REUSE)
  await pool.query(`delete from person where project_id in ($1, $2)`, [pid, small.projectId]);
// The deleted and rolled-back persons leave dead rows that slow the next benchmark's person reads (planning a
// lookup probes index ends through them: 90 ms of planning per /flags person read in one run).
await pool.query('vacuum analyze person, person_distinct_id');
await api.stop();
await koaRouter.stop();
await loadPool.end();
await pool.end();
await orm.close();
