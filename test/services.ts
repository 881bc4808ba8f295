// Real processes and scale-out parts the tests start: API and worker processes (node api/main.ts,
// node worker/main.ts), PgBouncer in transaction mode, a three-node Redis Cluster. Each is started
// on ports of its own and stopped by the returned function.
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, writeFileSync, chmodSync, readFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';
import { eventually } from './helpers.ts';
import { CHDB_DIRECTORY_PREFIX } from './chdb-directories.ts';

export const root = fileURLToPath(new URL('..', import.meta.url));

/** A port nobody listens on now. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
    server.on('error', reject);
  });
}

export interface ServiceProcess {
  child: ChildProcess;
  /** Everything it wrote to stderr (and stdout), for failure messages. */
  output: () => string;
  stop: () => Promise<void>;
}

export function startNode(script: string, env: Record<string, string>, args: string[] = []): ServiceProcess {
  const child = spawn(process.execPath, [script, ...args], {
    cwd: root,
    env: { ...process.env, LOG_LEVEL: 'warn', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout!.on('data', (chunk) => (output += chunk));
  child.stderr!.on('data', (chunk) => (output += chunk));
  return {
    child,
    output: () => output,
    stop: () =>
      new Promise((resolve) => {
        if (child.exitCode !== null || child.signalCode !== null) return resolve();
        child.once('exit', () => resolve());
        child.kill('SIGKILL');
      }),
  };
}

/**
 * An API process; resolves once /_ready answers 200. Up to 90 s: on a machine at load 15 (two full
 * suites beside other work) importing the API and connecting took over 30 s.
 */
export async function startApiProcess(env: Record<string, string>): Promise<ServiceProcess & { baseUrl: string }> {
  const port = await freePort();
  const api = startNode('api/main.ts', { HOST: '127.0.0.1', PORT: String(port), ...env });
  const baseUrl = `http://127.0.0.1:${port}`;
  try {
    await eventually(async () => {
      if (api.child.exitCode !== null) throw new Error(`API exited: ${api.output()}`);
      return (
        (await fetch(`${baseUrl}/_ready`).then(
          (r) => r.status === 200,
          () => false,
        )) || null
      );
    }, 90_000);
  } catch (error) {
    await api.stop();
    throw new Error(`API did not become ready: ${(error as Error).message}\n${api.output()}`);
  }
  return { ...api, baseUrl };
}

export function startWorkerProcess(env: Record<string, string>): ServiceProcess {
  return startNode('worker/main.ts', env);
}

/**
 * The test-only ClickHouse HTTP front (test/clickhouse-server.ts) on a port of its own, owning a chDB
 * directory of its own; `url` is what CLICKHOUSE_URL takes. Resolves once it answers /ping.
 */
export async function startClickHouseServer(
  port?: number,
  path = mkdtempSync(join(tmpdir(), CHDB_DIRECTORY_PREFIX)),
): Promise<ServiceProcess & { url: string; path: string; port: number }> {
  const chosen = port ?? (await freePort());
  const front = startNode('test/clickhouse-server.ts', {}, ['--port', String(chosen), '--path', path]);
  const url = `http://127.0.0.1:${chosen}`;
  await eventually(async () => {
    if (front.child.exitCode !== null) throw new Error(`ClickHouse front exited: ${front.output()}`);
    return fetch(`${url}/ping`).then(
      (r) => r.ok,
      () => false,
    );
  }, 60_000);
  return { ...front, url, path, port: chosen };
}

/**
 * PgBouncer in transaction pooling mode in front of the test database's server. It refuses to run
 * as root, so it runs as `postgres` from a folder that user owns.
 */
export async function startPgBouncer(): Promise<{ url: (database: string) => string; stop: () => Promise<void> }> {
  const dir = mkdtempSync(join(tmpdir(), 'pgbouncer-'));
  chmodSync(dir, 0o777);
  const port = await freePort();
  const direct = new URL(process.env.DATABASE_URL!);
  writeFileSync(join(dir, 'users.txt'), `"${direct.username || 'postgres'}" ""\n`);
  writeFileSync(
    join(dir, 'pgbouncer.ini'),
    [
      '[databases]',
      `* = host=${direct.hostname} port=${direct.port || 5432}`,
      '[pgbouncer]',
      `listen_addr = 127.0.0.1`,
      `listen_port = ${port}`,
      `unix_socket_dir =`,
      `auth_type = trust`,
      `auth_file = ${join(dir, 'users.txt')}`,
      `pool_mode = transaction`,
      `max_client_conn = 500`,
      `default_pool_size = 20`,
      `logfile = ${join(dir, 'pgbouncer.log')}`,
      `pidfile = ${join(dir, 'pgbouncer.pid')}`,
      '',
    ].join('\n'),
  );
  execFileSync('chown', ['-R', 'postgres', dir]);
  const binary = existsSync('/usr/sbin/pgbouncer') ? '/usr/sbin/pgbouncer' : 'pgbouncer';
  execFileSync(binary, ['-d', '-u', 'postgres', join(dir, 'pgbouncer.ini')], { cwd: dir });
  const pid = Number(
    await eventually(async () =>
      existsSync(join(dir, 'pgbouncer.pid')) ? readFileSync(join(dir, 'pgbouncer.pid'), 'utf8').trim() : null,
    ),
  );
  const url = (database: string) => `postgres://${direct.username || 'postgres'}@127.0.0.1:${port}/${database}`;
  return {
    url,
    stop: async () => {
      try {
        process.kill(pid, 'SIGTERM');
      } catch {
        // already gone
      }
    },
  };
}

/** A three-node Redis Cluster (no replicas) on ports of its own, each node in its own folder. */
export async function startRedisCluster(): Promise<{ nodes: string; stop: () => Promise<void> }> {
  const ports = [await freePort(), await freePort(), await freePort()];
  const children: ChildProcess[] = [];
  for (const port of ports) {
    const dir = mkdtempSync(join(tmpdir(), `redis-cluster-${port}-`));
    const args = [
      '--port',
      String(port),
      '--bind',
      '127.0.0.1',
      '--cluster-enabled',
      'yes',
      '--cluster-config-file',
      'nodes.conf',
      '--save',
      '',
      '--appendonly',
      'no',
    ];
    children.push(spawn('redis-server', args, { cwd: dir, stdio: 'ignore' }));
  }
  const cli = (args: string[]) =>
    execFileSync('redis-cli', args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  await eventually(
    async () => ports.every((port) => cli(['-p', String(port), 'ping']).trim() === 'PONG') || null,
    10_000,
  ).catch(() => undefined);
  cli(['--cluster', 'create', ...ports.map((p) => `127.0.0.1:${p}`), '--cluster-yes']);
  await eventually(
    async () =>
      ports.every((port) => cli(['-p', String(port), 'cluster', 'info']).includes('cluster_state:ok')) || null,
    20_000,
  );
  return {
    nodes: ports.map((p) => `127.0.0.1:${p}`).join(','),
    stop: async () => {
      for (const child of children) child.kill('SIGKILL');
    },
  };
}
