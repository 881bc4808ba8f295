// What every benchmark needs: its own database (analytics_bench), the API running as a separate
// process, an account with a key, and a pg pool for baselines in the same run.
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { createAccount } from '../test/helpers.ts';
import { ensureDatabase } from '../shared/platform/db/ensure-database.ts';
import { initOrm, migrate } from '../shared/platform/db/orm.ts';
import { cpuMeter, percentile } from './stats.ts';

export const BENCH_DATABASE_URL =
  process.env.BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/analytics_bench';
const root = fileURLToPath(new URL('..', import.meta.url));

export async function benchSetup() {
  await ensureDatabase(BENCH_DATABASE_URL);
  const orm = await initOrm(BENCH_DATABASE_URL);
  await migrate(orm, BENCH_DATABASE_URL);
  const account = await createAccount(orm);
  // Baselines run with the service's session settings, so a ratio measures the service, not a setting.
  const pool = new pg.Pool({ connectionString: BENCH_DATABASE_URL, max: 8 });
  return { orm, account, pool };
}

/**
 * Runs `load` with the event table's indexes dropped, then builds them again (each partition's by one
 * sort, not millions of random inserts). Loading 10M events with the indexes in place slowed from
 * about 33,000 to under 1,000 rows/s past 6M: the distinct-id and uuid indexes take every row at a
 * random page once they outgrow shared_buffers. For a bench's own database only: other sessions
 * reading events meanwhile see no index.
 */
export async function withoutEventIndexes<T>(pool: pg.Pool, load: () => Promise<T>): Promise<T> {
  const { rows: indexes } = await pool.query<{ name: string; definition: string }>(
    `select indexrelid::regclass::text as name, pg_get_indexdef(indexrelid) as definition from pg_index
      where indrelid = 'event'::regclass and not exists (select 1 from pg_constraint where conindid = indexrelid)`,
  );
  for (const index of indexes) await pool.query(`drop index ${index.name}`);
  try {
    return await load();
  } finally {
    // A partitioned table's definition reads "ON ONLY", which would build no partition's index.
    for (const index of indexes) await pool.query(index.definition.replace(' ON ONLY ', ' ON '));
  }
}

/** The API as its own process (what users run), on a free port; resolves once /_ready answers 200. */
export const startApiProcess = (env: Record<string, string> = {}, nodeArgs: string[] = []) =>
  startServerProcess(['api/main.ts'], { env, nodeArgs });

/** The Koa + @koa/router + pg baseline (bench/baseline/koa-router.ts) as its own process; `env` configures it. */
export const startKoaRouterProcess = (env: Record<string, string> = {}) =>
  startServerProcess(['bench/baseline/koa-router.ts'], { readyPath: '/_health', env });

// Every server process a benchmark starts, killed however the benchmark ends (normal exit, a thrown
// error, Ctrl-C, SIGTERM), so none is left holding a port and database connections. A benchmark
// killed outright (SIGKILL, an OOM kill) runs no handler: each child also watches its parent and
// stops itself once it is gone (ORPHAN_GUARD, loaded before the child's own code).
const children = new Set<ChildProcess>();
const killChildren = () => {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
};
process.once('exit', killChildren);
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
  process.once(signal, () => {
    killChildren();
    process.exit(128 + (signal === 'SIGINT' ? 2 : signal === 'SIGTERM' ? 15 : 1));
  });
}
process.once('uncaughtException', (error) => {
  console.error(error);
  process.exit(1); // the exit handler kills the children
});
process.once('unhandledRejection', (error) => {
  console.error(error);
  process.exit(1);
});

const ORPHAN_GUARD = `data:text/javascript,${encodeURIComponent(
  'const parent = process.ppid; ' +
    'setInterval(() => { if (process.ppid !== parent) process.kill(process.pid, "SIGTERM"); }, 500).unref();',
)}`;

/**
 * Starts `node …args` on a free port and waits until `readyPath` answers 200 (for the API, /_ready:
 * PostgreSQL and Redis answer). Throws if the process exits or is not ready within `timeoutMs`.
 */
export async function startServerProcess(
  args: string[],
  options: { env?: Record<string, string>; nodeArgs?: string[]; readyPath?: string; timeoutMs?: number } = {},
): Promise<{ baseUrl: string; child: ChildProcess; stop: () => Promise<void> }> {
  const port = 20_000 + Math.floor(Math.random() * 10_000);
  // BENCH_NODE_ARGS (e.g. `--cpu-prof`) profiles the server process.
  // options.nodeArgs: e.g. `--import` of a module the process must load first (bench/record-queries.ts).
  const nodeArgs = [...(process.env.BENCH_NODE_ARGS?.split(' ').filter(Boolean) ?? []), ...(options.nodeArgs ?? [])];
  const child = spawn(process.execPath, [...nodeArgs, `--import=${ORPHAN_GUARD}`, ...args], {
    cwd: root,
    env: {
      ...process.env,
      DATABASE_URL: BENCH_DATABASE_URL,
      PORT: String(port),
      RATE_LIMIT_ENABLED: 'false',
      LOG_LEVEL: 'silent',
      REDIS_PREFIX: process.env.BENCH_REDIS_PREFIX ?? 'bench',
      DATABASE_POOL_MAX: '16',
      ...options.env,
    },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  children.add(child);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  exited.then(() => children.delete(child));
  const baseUrl = `http://127.0.0.1:${port}`;
  const timeoutMs = options.timeoutMs ?? 30_000;
  const deadline = Date.now() + timeoutMs;
  const name = args.at(-1)?.startsWith('\n') ? 'inline server' : args.join(' ');
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) {
      throw new Error(`${name} exited before it was ready (${child.exitCode ?? child.signalCode})`);
    }
    const status = await fetch(`${baseUrl}${options.readyPath ?? '/_ready'}`).then(
      (r) => r.status,
      () => 0,
    );
    if (status === 200) break;
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`${name} not ready after ${timeoutMs} ms (last status ${status || 'no answer'})`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    baseUrl,
    child,
    stop: async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      await exited;
    },
  };
}

/** Runs `worker` with `concurrency` parallel loops until `seconds` pass; returns per-call latencies (ms). */
export async function loadFor(
  seconds: number,
  concurrency: number,
  worker: (i: number) => Promise<void>,
): Promise<number[]> {
  const latencies: number[] = [];
  const deadline = Date.now() + seconds * 1000;
  let counter = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (Date.now() < deadline) {
        const i = counter++;
        const started = performance.now();
        await worker(i);
        latencies.push(performance.now() - started);
      }
    }),
  );
  return latencies;
}

const keepAlive = new http.Agent({ keepAlive: true });

/**
 * Closes the keep-alive agent's idle connections. A benchmark that leaves a server idle for longer than
 * its keep-alive timeout (Node's 5 s) calls this before loading it again: otherwise a request can go
 * out on a connection the server is closing at that moment, and fail with "socket hang up".
 */
export function closeIdleConnections(): void {
  for (const sockets of Object.values(keepAlive.freeSockets)) for (const socket of sockets ?? []) socket.destroy();
}

/**
 * GET `url` and read the whole body; throws unless 200. node:http on a keep-alive agent: fetch
 * (undici) costs about 0.15 ms more per request here, which would count against the server.
 */
export function getOk(url: string, headers: Record<string, string> = {}): Promise<void> {
  return new Promise((resolve, reject) => {
    http
      .get(url, { agent: keepAlive, headers }, (res) => {
        res.resume();
        res.on('end', () => (res.statusCode === 200 ? resolve() : reject(new Error(`GET ${url}: ${res.statusCode}`))));
      })
      .on('error', reject);
  });
}

/**
 * POST `body` as JSON (or, with `extraHeaders`, e.g. a gzipped JSON body) to `url` on the keep-alive
 * agent and read the whole answer; throws unless 200.
 */
export function postOk(url: string, body: string | Buffer, extraHeaders: Record<string, string> = {}): Promise<void> {
  return new Promise((resolve, reject) => {
    const headers = {
      'content-type': 'application/json',
      'content-length': Buffer.byteLength(body),
      ...extraHeaders,
    };
    const req = http.request(url, { method: 'POST', agent: keepAlive, headers }, (res) => {
      res.resume();
      res.on('end', () => (res.statusCode === 200 ? resolve() : reject(new Error(`POST ${url}: ${res.statusCode}`))));
    });
    req.on('error', reject);
    req.end(body);
  });
}

/** CPU seconds (user + system) process `pid` has used, from /proc (Linux); undefined once it ended. */
function cpuSecondsOf(pid: number): number | undefined {
  try {
    // Fields after the command name (which may hold spaces): utime and stime are the 12th and 13th.
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
    return (Number(fields[11]) + Number(fields[12])) / 100; // USER_HZ is 100 on Linux
  } catch {
    return undefined;
  }
}

/**
 * Starts metering the CPU of the PostgreSQL backends of `pool`'s database only (pg_stat_activity →
 * /proc/<pid>/stat), not every postgres process on the machine (other databases, other benchmarks,
 * checkpointer, WAL writer). Backends are listed again every 250 ms, so one that connects during the
 * measurement counts from its start and one that disconnects keeps what it used until last seen.
 * `stop()` gives the CPU seconds they used since.
 */
export async function databaseCpuMeter(pool: pg.Pool): Promise<{ stop: () => Promise<number> }> {
  const first = new Map<number, number>();
  const last = new Map<number, number>();
  const sample = async (initial: boolean) => {
    const { rows } = await pool.query(
      `select pid from pg_stat_activity where datname = current_database()
          and backend_type in ('client backend', 'parallel worker', 'autovacuum worker')`,
    );
    for (const { pid } of rows) {
      const seconds = cpuSecondsOf(pid);
      if (seconds === undefined) continue;
      if (!first.has(pid)) first.set(pid, initial ? seconds : 0);
      last.set(pid, seconds);
    }
  };
  await sample(true);
  let sampling = Promise.resolve();
  const timer = setInterval(() => {
    sampling = sampling.then(() => sample(false)).catch(() => undefined);
  }, 250);
  return {
    stop: async () => {
      clearInterval(timer);
      await sampling;
      await sample(false);
      let used = 0;
      for (const [pid, seconds] of last) used += seconds - (first.get(pid) ?? 0);
      return used;
    },
  };
}

/** One side of an interleaved comparison: a request, and the server process answering it (if any). */
export interface PairSide {
  name: string;
  /** One request; `i` counts this side's requests across its windows. */
  request: (i: number) => Promise<void>;
  /** The server process whose CPU counts per request; none for a statement this process sends itself. */
  serverPid?: number;
  /** Requests sent before the first window (caches, JIT, pool connections); 200 unless told. */
  warmup?: number;
}

/** One window of one side: throughput, latency (ms), and CPU per request (ms) of each process involved. */
export interface WindowFigures {
  n: number;
  rate: number;
  p50: number;
  p99: number;
  /** This process (the load's client side, or the side's own pg queries), the server process, PostgreSQL backends. */
  cpu: { client: number; server: number; postgres: number; total: number };
}

export interface PairsResult {
  a: WindowFigures[];
  b: WindowFigures[];
  /** Throughput of A ÷ throughput of B, per pair. */
  ratios: number[];
  median: { ratio: number; a: WindowFigures; b: WindowFigures };
}

export const median = (values: number[]) => {
  const sorted = [...values].sort((x, y) => x - y);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
};
const medianFigures = (windows: WindowFigures[]): WindowFigures => {
  const of = (pick: (w: WindowFigures) => number) => median(windows.map(pick));
  return {
    n: of((w) => w.n),
    rate: of((w) => w.rate),
    p50: of((w) => w.p50),
    p99: of((w) => w.p99),
    cpu: {
      client: of((w) => w.cpu.client),
      server: of((w) => w.cpu.server),
      postgres: of((w) => w.cpu.postgres),
      total: of((w) => w.cpu.total),
    },
  };
};

/** One window of `side` at `concurrency`, with the CPU its processes used (backends listed on `meterPool`). */
async function measureWindow(
  side: PairSide,
  seconds: number,
  concurrency: number,
  meterPool: pg.Pool,
  offset: number,
): Promise<WindowFigures> {
  const server = side.serverPid === undefined ? () => 0 : cpuMeter(side.serverPid);
  const backends = await databaseCpuMeter(meterPool);
  const client = process.cpuUsage();
  const latencies = await loadFor(seconds, concurrency, (i) => side.request(offset + i));
  const used = process.cpuUsage(client);
  const postgres = await backends.stop();
  const n = latencies.length;
  const cpu = {
    client: (used.user + used.system) / 1000 / n,
    server: (server() * 1000) / n,
    postgres: (postgres * 1000) / n,
  };
  return {
    n,
    rate: n / seconds,
    p50: percentile(latencies, 50),
    p99: percentile(latencies, 99),
    cpu: { ...cpu, total: cpu.client + cpu.server + cpu.postgres },
  };
}

/**
 * Interleaved pairs: A and B each run for a window of `seconds` (BENCH_WINDOW_SECONDS, 10) at the same
 * `concurrency`, one right after the other, `pairs` times (BENCH_PAIRS, 3; at least 3), the order
 * alternating (AB, BA, AB…) so a change in the machine's load falls on both sides alike. Returns each
 * window's figures, A's throughput ÷ B's per pair, and the medians; `printPairs` prints them.
 * `meterPool` lists the bench database's PostgreSQL backends for their CPU: a pool the load does not use.
 */
export async function interleavedPairs(options: {
  a: PairSide;
  b: PairSide;
  concurrency: number;
  meterPool: pg.Pool;
  pairs?: number;
  seconds?: number;
}): Promise<PairsResult> {
  const pairs = options.pairs ?? Number(process.env.BENCH_PAIRS ?? 3);
  const seconds = options.seconds ?? Number(process.env.BENCH_WINDOW_SECONDS ?? 10);
  if (!(pairs >= 3)) throw new Error(`interleaved pairs: at least 3 pairs, not ${pairs}`);
  const { a, b, concurrency, meterPool } = options;
  for (const side of [a, b]) for (let i = 0; i < (side.warmup ?? 200); i++) await side.request(i);
  const result: PairsResult = { a: [], b: [], ratios: [], median: undefined as unknown as PairsResult['median'] };
  const sent = { a: 0, b: 0 };
  for (let pair = 0; pair < pairs; pair++) {
    for (const which of pair % 2 ? (['b', 'a'] as const) : (['a', 'b'] as const)) {
      const side = which === 'a' ? a : b;
      const label = `  ${a.name} vs ${b.name}: pair ${pair + 1}/${pairs}, ${side.name} for ${seconds}s at ${concurrency}…`;
      if (process.stdout.isTTY) process.stdout.write(`\r\x1b[K${label}`);
      const figures = await measureWindow(side, seconds, concurrency, meterPool, sent[which]);
      sent[which] += figures.n;
      result[which].push(figures);
    }
    result.ratios.push(result.a[pair].rate / result.b[pair].rate);
  }
  if (process.stdout.isTTY) process.stdout.write('\r\x1b[K');
  result.median = { ratio: median(result.ratios), a: medianFigures(result.a), b: medianFigures(result.b) };
  return result;
}

/** Prints each pair (rates, p50/p99, A÷B) and the medians, with CPU per request of each process. */
export function printPairs(title: string, { a, b }: { a: PairSide; b: PairSide }, result: PairsResult): void {
  const ms = (value: number) => (value < 10 ? value.toFixed(2) : value.toFixed(0));
  const cpu = (f: WindowFigures) =>
    `client ${f.cpu.client.toFixed(3)} + server ${f.cpu.server.toFixed(3)} + PostgreSQL ${f.cpu.postgres.toFixed(3)} = ${f.cpu.total.toFixed(3)}`;
  const side = (f: WindowFigures) =>
    `${f.rate.toFixed(f.rate < 100 ? 1 : 0)}/s p50 ${ms(f.p50)} ms p99 ${ms(f.p99)} ms`;
  console.log(`  ${title}: ${a.name} (A) vs ${b.name} (B), ${result.ratios.length} interleaved pairs`);
  result.ratios.forEach((ratio, pair) => {
    console.log(
      `    pair ${pair + 1}: A ${side(result.a[pair])} | B ${side(result.b[pair])} | A/B ${ratio.toFixed(2)}×`,
    );
  });
  const m = result.median;
  console.log(
    `    median: A ${side(m.a)} | B ${side(m.b)} | A/B ${m.ratio.toFixed(2)}× (pairs ${Math.min(...result.ratios).toFixed(2)}–${Math.max(...result.ratios).toFixed(2)}×)`,
  );
  console.log(
    `    median CPU ms per request: A ${cpu(m.a)} | B ${cpu(m.b)} | B/A ${(m.b.cpu.total / m.a.cpu.total).toFixed(2)}×`,
  );
}
