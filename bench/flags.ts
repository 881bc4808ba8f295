// Flag evaluation throughput: POST /flags/?v=2 against the API process, beside a bare Koa handler
// answering a constant JSON body in a process of its own, in the same run and with the same load.
import { spawn } from 'node:child_process';
import { benchSetup, loadFor, startApiProcess } from './harness.ts';
import { call } from '../test/helpers.ts';
import { percentile } from './stats.ts';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 10);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 16);

const { orm, account, pool } = await benchSetup();
const api = await startApiProcess();
// Five launched experiments' flags, one with a person-property condition.
for (let i = 0; i < 5; i++) {
  await call(api.baseUrl, 'POST', `/api/projects/${account.projectId}/experiments/`, {
    key: account.apiKey,
    body: { name: `Bench ${i}`, feature_flag_key: `bench-${i}-${Date.now()}`, start_date: new Date().toISOString() },
  });
}

const bareSource = `
  import Koa from 'koa';
  const app = new Koa();
  app.use(async (ctx) => { for await (const _ of ctx.req) {} ctx.body = { flags: {}, errorsWhileComputingFlags: false }; });
  app.listen(Number(process.env.PORT), '127.0.0.1');`;
const barePort = 30_000 + Math.floor(Math.random() * 5000);
const bare = spawn(process.execPath, ['--input-type=module', '-e', bareSource], { cwd: process.cwd(), env: { ...process.env, PORT: String(barePort) }, stdio: 'inherit' });
await new Promise((r) => setTimeout(r, 800));

async function measure(url: string) {
  let n = 0;
  const latencies = await loadFor(SECONDS, CONCURRENCY, async (i) => {
    const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ token: account.projectToken, distinct_id: `user-${i % 10_000}`, person_properties: { plan: 'pro' } }) });
    await res.arrayBuffer();
    if (res.status !== 200) throw new Error(`status ${res.status}`);
    n++;
  });
  return { rate: n / SECONDS, p50: percentile(latencies, 50), p99: percentile(latencies, 99) };
}

console.log(`flags: ${SECONDS}s each, ${CONCURRENCY} concurrent clients`);
const bareResult = await measure(`http://127.0.0.1:${barePort}/flags`);
const apiResult = await measure(`${api.baseUrl}/flags/?v=2`);
console.log(`  bare Koa handler: ${Math.round(bareResult.rate)} req/s (p99 ${bareResult.p99.toFixed(1)} ms)`);
console.log(`  /flags?v=2 (5 flags, person lookup): ${Math.round(apiResult.rate)} req/s (p50 ${apiResult.p50.toFixed(1)} ms, p99 ${apiResult.p99.toFixed(1)} ms)`);
console.log(`  ratio: ${(apiResult.rate / bareResult.rate).toFixed(2)}`);
bare.kill();
await api.stop();
await pool.end();
await orm.close();
