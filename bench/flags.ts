// Flag evaluation at BENCH_CONCURRENCY (16) concurrent clients, each comparison in interleaved pairs of
// 10-s windows at the same concurrency (bench/harness.ts interleavedPairs; BENCH_PAIRS, BENCH_WINDOW_SECONDS):
//   1. POST /flags/?v=2 (5 flags needing no person data, answered from the definitions cache) against the
//      raw definitions query (a project's active flags) through `pg` from this process — the target:
//      ≥ 0.75× its throughput with p99 < 20 ms;
//   2. the same /flags against Koa + @koa/router answering a constant after parsing the body
//      (bench/baseline/koa-router.ts), the HTTP floor of this machine;
//   3. /flags for a project with those 5 plus one flag on a person property the SDK did not send (the
//      person is read on every request) against the raw definitions query.
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
const floor = await startKoaRouterProcess();

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

// Dead person rows another benchmark left (deletes, rolled-back inserts) slow the person read; start clean.
await pool.query('vacuum analyze person, person_distinct_id, feature_flag');

const flagsBody = (target: TestAccount, i: number) =>
  JSON.stringify({ token: target.projectToken, distinct_id: `user-${i % 10_000}`, person_properties: { plan: 'pro' } });

const loadAverage = () => os.loadavg()[0].toFixed(1);
console.log(
  `flags: ${CONCURRENCY} concurrent clients, ${new Date().toISOString().slice(0, 10)}, load average ${loadAverage()} at the start (${os.cpus().length} cores)`,
);
// The statement /flags ran for its definitions (shared/flags/store.ts, activeFlags).
const definitionsSql = `select id, key, name, version, active, deleted, filters, ensure_experience_continuity,
    evaluation_runtime from feature_flag where project_id = $1 and active and not deleted order by id`;
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
  name: 'Koa + @koa/router constant answer',
  serverPid: floor.child.pid,
  request: (i) => postOk(`${floor.baseUrl}/flags/?v=2`, flagsBody(account, i)),
};
const person = askFlags('POST /flags/?v=2 (+1 person-property flag)', withPerson);
const comparisons: [string, PairSide, PairSide][] = [
  ['/flags vs the raw definitions query (target ≥ 0.75×, p99 < 20 ms)', flags, raw],
  ['/flags vs the HTTP floor', flags, koaRouter],
  ['/flags with a person read vs the raw definitions query', person, raw],
];
for (const [title, a, b] of comparisons) {
  const result = await interleavedPairs({ a, b, concurrency: CONCURRENCY, meterPool: setupPool });
  printPairs(title, { a, b }, result);
  if (a === flags && b === raw) {
    const met = result.median.ratio >= 0.75 && result.median.a.p99 < 20;
    console.log(
      `    target ≥ 0.75× the raw query with p99 < 20 ms: ${met ? 'met' : 'NOT met'} (median ${result.median.ratio.toFixed(2)}×, p99 ${result.median.a.p99.toFixed(1)} ms)`,
    );
  }
}
console.log(
  `  load average ${loadAverage()} at the end: absolute rates reflect the sharing, the pairs' ratios less so`,
);

await floor.stop();
await api.stop();
await pool.end();
await setupPool.end();
await orm.close();
