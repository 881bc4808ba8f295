// Flag evaluation throughput at BENCH_CONCURRENCY (16) concurrent clients, side by side in one run:
//   1. the raw definitions query (a project's active flags) through `pg`, from this process;
//   2. POST /flags/?v=2 for a project whose 5 flags need no person data (launched experiments);
//   3. POST /flags/?v=2 for a project with those 5 plus one flag on a person property the SDK did not
//      send, so the person is read on every request;
//   4. a bare Koa handler answering a constant body, as the HTTP floor of this machine.
// Ratios are against (1) measured in the same run; the machine is shared, so absolute rates vary.
// CPU per request (the load's client side in this process, the server process, PostgreSQL backends
// on the bench database) is also reported: it moves less than throughput when others load the machine.
import pg from 'pg';
import {
  BENCH_DATABASE_URL,
  benchSetup,
  databaseCpuMeter,
  loadFor,
  postOk,
  startApiProcess,
  startServerProcess,
} from './harness.ts';
import { call, createAccount, type TestAccount } from '../test/helpers.ts';
import { cpuMeter, percentile, progress } from './stats.ts';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 10);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 16);

const { orm, account, pool: setupPool } = await benchSetup();
const pool = new pg.Pool({ connectionString: BENCH_DATABASE_URL, max: CONCURRENCY });
const api = await startApiProcess();
const bareSource = `
  import Koa from 'koa';
  const app = new Koa();
  app.use(async (ctx) => { for await (const _ of ctx.req) {} ctx.body = { flags: {}, errorsWhileComputingFlags: false }; });
  app.listen(Number(process.env.PORT), '127.0.0.1');`;
const bare = await startServerProcess(['--input-type=module', '-e', bareSource]);

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

interface Result {
  rate: number;
  p50: number;
  p99: number;
  /** CPU per request, ms: this process (the load's client side), the server process, PostgreSQL backends. */
  cpu: { client: number; server: number; postgres: number };
}

type Request = (i: number) => Promise<void>;
async function measure(name: string, serverPid: number | undefined, request: Request): Promise<Result> {
  for (let i = 0; i < 200; i++) await request(i); // warm-up: caches, JIT, pool connections
  progress(`  measuring ${name} for ${SECONDS}s…`);
  const server = serverPid === undefined ? () => 0 : cpuMeter(serverPid);
  // The bench database's backends (ours and the API's pools), listed on the setup pool: not the load's.
  const backends = await databaseCpuMeter(setupPool);
  const client = process.cpuUsage();
  const latencies = await loadFor(SECONDS, CONCURRENCY, request);
  const used = process.cpuUsage(client);
  const postgres = await backends.stop();
  const n = latencies.length;
  return {
    rate: n / SECONDS,
    p50: percentile(latencies, 50),
    p99: percentile(latencies, 99),
    cpu: {
      client: (used.user + used.system) / 1000 / n,
      server: (server() * 1000) / n,
      postgres: (postgres * 1000) / n,
    },
  };
}

const flagsBody = (target: TestAccount, i: number) =>
  JSON.stringify({ token: target.projectToken, distinct_id: `user-${i % 10_000}`, person_properties: { plan: 'pro' } });

console.log(`flags: ${SECONDS}s each, ${CONCURRENCY} concurrent clients`);
// The statement /flags ran for its definitions (shared/flags/store.ts, activeFlags).
const definitionsSql = `select id, key, name, version, active, deleted, filters, ensure_experience_continuity,
    evaluation_runtime from feature_flag where project_id = $1 and active and not deleted order by id`;
const raw = await measure('raw definitions query', undefined, async () => {
  const { rows } = await pool.query(definitionsSql, [account.projectId]);
  if (rows.length !== 5) throw new Error(`expected 5 flags, got ${rows.length}`);
});
const askFlags = (target: TestAccount) => (i: number) => postOk(`${api.baseUrl}/flags/?v=2`, flagsBody(target, i));
const flags = await measure('/flags', api.child.pid, askFlags(account));
const person = await measure('/flags with a person-property flag', api.child.pid, askFlags(withPerson));
const floor = await measure('bare Koa', bare.child.pid, (i) => postOk(`${bare.baseUrl}/flags`, flagsBody(account, i)));
progress('');

const cpuTotal = (r: Result) => r.cpu.client + r.cpu.server + r.cpu.postgres;
const ms = (value: number, digits = 2) => value.toFixed(digits).padStart(digits + 4);
const line = (name: string, r: Result) =>
  `  ${name.padEnd(44)} ${String(Math.round(r.rate)).padStart(6)} req/s  p50 ${ms(r.p50)} ms  p99 ${ms(r.p99)} ms` +
  `  ×${(r.rate / raw.rate).toFixed(2)} of raw | CPU ms/req: client ${ms(r.cpu.client, 3)}` +
  ` server ${ms(r.cpu.server, 3)} postgres ${ms(r.cpu.postgres, 3)} = ${ms(cpuTotal(r), 3)}` +
  ` (×${(cpuTotal(raw) / cpuTotal(r)).toFixed(2)} of raw)`;
console.log(line('raw definitions query through pg', raw));
console.log(line('POST /flags/?v=2 (5 flags, no person data)', flags));
console.log(line('POST /flags/?v=2 (+1 person-property flag)', person));
console.log(line('bare Koa handler (HTTP floor)', floor));
console.log(
  `  ratio /flags : raw definitions query = ${(flags.rate / raw.rate).toFixed(2)} by throughput, ` +
    `${(cpuTotal(raw) / cpuTotal(flags)).toFixed(2)} by CPU per request (the load's client side included on both)`,
);
const load = (await import('node:os')).loadavg()[0];
if (load > 1.5) {
  console.log(`  note: load average ${load.toFixed(1)} at the end (2 cores): rates and latencies reflect the sharing`);
}

await bare.stop();
await api.stop();
await pool.end();
await setupPool.end();
await orm.close();
