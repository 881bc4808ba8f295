// Flag evaluation at BENCH_CONCURRENCY (16) concurrent clients, each comparison in interleaved pairs of
// 10-s windows at the same concurrency (bench/harness.ts interleavedPairs; BENCH_PAIRS, BENCH_WINDOW_SECONDS):
//   1. POST /flags/?v=2 (5 flags needing no person data, answered from the definitions cache) against its
//      like-for-like baseline — the target: ≥ 0.4× its throughput with p99 < 20 ms. The baseline is bare
//      Koa + @koa/router (bench/baseline/koa-router.ts) reading and parsing the body, finding the project
//      by its token in a Map and sending the bytes the API answered that project at the bench's start,
//      with the API's content type (the bench checks that they are the API's, length and type);
//   2. the same /flags against the raw definitions query (a project's active flags) through `pg` from
//      this process (an earlier target: ≥ 0.75×);
//   3. /flags for a project with those 5 plus one flag on a person property the SDK did not send (the
//      person is read on every request) against the raw definitions query;
//   4. /flags for a project with those 5 plus a bandit experiment's flag (parameters.allocation: its
//      sticky variant is read on every request; the distinct ids were all served before) against the
//      raw definitions query.
// CPU per request of each process involved (this process: the load's client side, or the raw query's pg
// client; the server process; the bench database's PostgreSQL backends) is printed beside throughput:
// it moves less than throughput when others load the machine.
import os from 'node:os';
import pg from 'pg';
import {
  BENCH_DATABASE_URL,
  benchSetup,
  interleavedPairs,
  type PairSide,
  postOk,
  printPairs,
  startApiProcess,
  startKoaRouterProcess,
} from './harness.ts';
import { call, createAccount, type TestAccount } from '../test/helpers.ts';

const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 16);

const { orm, account, pool: setupPool } = await benchSetup();
const pool = new pg.Pool({ connectionString: BENCH_DATABASE_URL, max: CONCURRENCY });
const api = await startApiProcess();

/** Five launched experiments' flags (no release conditions on person properties). */
async function experimentFlags(target: TestAccount) {
  for (let i = 0; i < 5; i++) {
    const res = await call(api.baseUrl, 'POST', `/api/projects/${target.projectId}/experiments/`, {
      key: target.apiKey,
      body: { name: `Bench ${i}`, feature_flag_key: `bench-${i}-${Date.now()}`, start_date: new Date().toISOString() },
    });
    if (res.status !== 201) throw new Error(`creating an experiment: ${res.status} ${res.text}`);
  }
}
await experimentFlags(account);
const EMAIL_RULE = { key: 'email', operator: 'icontains', value: '@example.com', type: 'person' };
const withPerson = await createAccount(orm);
await experimentFlags(withPerson);
await pool.query(
  `insert into feature_flag (project_id, key, name, filters, active)
   values ($1, 'bench-email', 'email rule', $2::jsonb, true)`,
  [withPerson.projectId, JSON.stringify({ groups: [{ properties: [EMAIL_RULE], rollout_percentage: 100 }] })],
);

const withBandit = await createAccount(orm);
await experimentFlags(withBandit);
{
  const res = await call(api.baseUrl, 'POST', `/api/projects/${withBandit.projectId}/experiments/`, {
    key: withBandit.apiKey,
    body: {
      name: 'Bench bandit',
      feature_flag_key: `bench-bandit-${Date.now()}`,
      start_date: new Date().toISOString(),
      parameters: { allocation: { type: 'thompson_sampling' } },
    },
  });
  if (res.status !== 201) throw new Error(`creating the bandit experiment: ${res.status} ${res.text}`);
  // Returning persons (the common case): every distinct id the load uses was served before, so each
  // request reads its sticky variant (a first serve also inserts it).
  await pool.query(
    `insert into feature_flag_sticky_variant (feature_flag_id, bucketing_value, project_id, variant)
     select $1, 'user-' || g, $2, case when g % 2 = 0 then 'control' else 'test' end from generate_series(0, 9999) g`,
    [res.body.feature_flag.id, withBandit.projectId],
  );
}

// Dead person rows another benchmark left (deletes, rolled-back inserts) slow the person read; start clean.
await pool.query('vacuum analyze person, person_distinct_id, feature_flag');

const flagsBody = (target: TestAccount, i: number) =>
  JSON.stringify({ token: target.projectToken, distinct_id: `user-${i % 10_000}`, person_properties: { plan: 'pro' } });

// The API's answer to one request of `target`, for the baseline to send as it is.
async function capturedAnswer(target: TestAccount) {
  const res = await fetch(`${api.baseUrl}/flags/?v=2`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: flagsBody(target, 0),
  });
  if (res.status !== 200) throw new Error(`/flags answered ${res.status}`);
  const answer = Buffer.from(await res.arrayBuffer());
  return {
    token: target.projectToken,
    projectId: target.projectId,
    contentType: res.headers.get('content-type'),
    answer,
  };
}
const captured = await capturedAnswer(account);
const floor = await startKoaRouterProcess({
  BASELINE_FLAGS: JSON.stringify([{ ...captured, answer: captured.answer.toString('base64') }]),
});
// Like for like: the baseline's answer is the API's to the same request (every API answer to it has the
// captured one's length: only its request id differs), with the same content type. Other distinct ids
// draw other variants, a few bytes longer or shorter.
for (let i = 0; i < 20; i++) {
  const post = (url: string) =>
    fetch(`${url}/flags/?v=2`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: flagsBody(account, 0),
    });
  const [ours, theirs] = await Promise.all([post(api.baseUrl), post(floor.baseUrl)]);
  const [a, b] = [Buffer.from(await ours.arrayBuffer()), Buffer.from(await theirs.arrayBuffer())];
  const type = [ours.headers.get('content-type'), theirs.headers.get('content-type')];
  if (!b.equals(captured.answer) || a.length !== b.length || type[0] !== type[1] || type[0] !== captured.contentType)
    throw new Error(
      `/flags: the baseline's answer is not the API's (${b.length} bytes, ${type[1]} vs ${a.length} bytes, ${type[0]}):\n${b}\n${a}`,
    );
}

const loadAverage = () => os.loadavg()[0].toFixed(1);
console.log(
  `flags: ${CONCURRENCY} concurrent clients, ${new Date().toISOString().slice(0, 10)}, load average ${loadAverage()} at the start (${os.cpus().length} cores)`,
);
// The statement /flags ran for its definitions (shared/flags/store.ts, activeFlags).
const definitionsSql = `select id, key, name, version, active, deleted, filters, ensure_experience_continuity,
    evaluation_runtime, exists (select 1 from experiment x where x.feature_flag_id = feature_flag.id
      and x.project_id = feature_flag.project_id and not x.deleted
      and jsonb_typeof(x.parameters->'allocation') = 'object') as sticky
    from feature_flag where project_id = $1 and active and not deleted order by id`;
const raw: PairSide = {
  name: 'raw definitions query through pg',
  request: async () => {
    const { rows } = await pool.query(definitionsSql, [account.projectId]);
    if (rows.length !== 5) throw new Error(`expected 5 flags, got ${rows.length}`);
  },
};
const askFlags = (name: string, target: TestAccount): PairSide => ({
  name,
  serverPid: api.child.pid,
  request: (i) => postOk(`${api.baseUrl}/flags/?v=2`, flagsBody(target, i)),
});
const flags = askFlags('POST /flags/?v=2 (5 flags)', account);
const koaRouter: PairSide = {
  name: 'Koa + @koa/router, token from memory, the same bytes',
  serverPid: floor.child.pid,
  request: (i) => postOk(`${floor.baseUrl}/flags/?v=2`, flagsBody(account, i)),
};
const person = askFlags('POST /flags/?v=2 (+1 person-property flag)', withPerson);
const bandit = askFlags('POST /flags/?v=2 (+1 bandit flag: sticky variant read)', withBandit);
const comparisons: [string, PairSide, PairSide][] = [
  [
    `/flags vs its like-for-like baseline (${captured.answer.length} bytes; target ≥ 0.4×, p99 < 20 ms)`,
    flags,
    koaRouter,
  ],
  ['/flags vs the raw definitions query (earlier target ≥ 0.75×)', flags, raw],
  ['/flags with a person read vs the raw definitions query', person, raw],
  ['/flags with a sticky (bandit) flag vs the raw definitions query', bandit, raw],
];
const headlines: string[] = [];
for (const [title, a, b] of comparisons) {
  const result = await interleavedPairs({ a, b, concurrency: CONCURRENCY, meterPool: setupPool });
  printPairs(title, { a, b }, result);
  const m = result.median;
  const pairs = `pairs ${Math.min(...result.ratios).toFixed(2)}–${Math.max(...result.ratios).toFixed(2)}×`;
  if (b === koaRouter) {
    const met = m.ratio >= 0.4 && m.a.p99 < 20;
    headlines.push(
      `/flags?v=2, 5 flags ÷ Koa+router (token from memory, same ${captured.answer.length} bytes): ${m.ratio.toFixed(2)}x (target ≥ 0.4×, p99 < 20 ms: p99 ${m.a.p99.toFixed(1)} ms; ${met ? 'met' : 'NOT met'}; ${pairs}) load ${loadAverage()}` +
        ` | server CPU per request ${(m.a.cpu.server * 1000).toFixed(0)} µs vs ${(m.b.cpu.server * 1000).toFixed(0)} µs`,
    );
    console.log(`    ${headlines.at(-1)}`);
  }
  if (a === flags && b === raw)
    console.log(
      `    earlier target ≥ 0.75× the raw query with p99 < 20 ms: ${m.ratio >= 0.75 && m.a.p99 < 20 ? 'met' : 'NOT met'} (median ${m.ratio.toFixed(2)}×, p99 ${m.a.p99.toFixed(1)} ms)`,
    );
}
for (const line of headlines) console.log(line);
console.log(
  `  load average ${loadAverage()} at the end: absolute rates reflect the sharing, the pairs' ratios less so`,
);

await floor.stop();
await api.stop();
await pool.end();
await setupPool.end();
await orm.close();
