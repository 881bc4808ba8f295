// What every benchmark needs: its own database (analytics_bench), the API running as a separate
// process, an account with a key, and a pg pool for baselines in the same run.
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { createAccount } from '../test/helpers.ts';
import { ensureDatabase } from '../shared/db/ensure-database.ts';
import { initOrm, migrate } from '../shared/db/orm.ts';

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

/** The API as its own process (what users run), on a free port; resolves once /_ready answers 200. */
export const startApiProcess = (env: Record<string, string> = {}) => startServerProcess(['api/main.ts'], { env });

/** The Koa + @koa/router + pg baseline (bench/baseline/koa-router.ts) as its own process. */
export const startKoaRouterProcess = () =>
  startServerProcess(['bench/baseline/koa-router.ts'], { readyPath: '/_health' });

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
  options: { env?: Record<string, string>; readyPath?: string; timeoutMs?: number } = {},
): Promise<{ baseUrl: string; child: ChildProcess; stop: () => Promise<void> }> {
  const port = 20_000 + Math.floor(Math.random() * 10_000);
  // BENCH_NODE_ARGS (e.g. `--cpu-prof`) profiles the server process.
  const nodeArgs = process.env.BENCH_NODE_ARGS?.split(' ').filter(Boolean) ?? [];
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
