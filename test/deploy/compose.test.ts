// docker-compose.yml for a real deployment, checked without a Docker engine: Debian's docker-compose
// validates and resolves the file (`docker-compose config`), and the resolved services are checked
// for what a deployment needs. The health probes are run here against real API and worker processes.
import { execFile, execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadConfig, SETTINGS_SCHEMA } from '../../shared/platform/config.ts';
import { initOrm } from '../../shared/platform/db/orm.ts';
import { sql } from '../db.ts';
import { createAccount, eventually } from '../helpers.ts';
import { freePort, root, startApiProcess, startWorkerProcess, type ServiceProcess } from '../services.ts';
import { missingPackage } from '../packages.ts';

function composeConfig(
  env: Record<string, string>,
  files = ['docker-compose.yml'],
): { code: number; stdout: string; stderr: string } {
  // Only PATH: a POSTGRES_PASSWORD or ADMIN_EMAIL of the machine must not leak into the check.
  try {
    const stdout = execFileSync('docker-compose', [...files.flatMap((f) => ['-f', f]), 'config'], {
      cwd: root,
      env: { PATH: process.env.PATH!, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    }).toString();
    return { code: 0, stdout, stderr: '' };
  } catch (error: any) {
    return { code: error.status, stdout: String(error.stdout), stderr: String(error.stderr) };
  }
}

/** docker-compose prints YAML; its own dependency (python3-yaml) turns it into JSON. */
const parseYaml = (yaml: string) =>
  JSON.parse(
    execFileSync('python3', ['-c', 'import sys, json, yaml; print(json.dumps(yaml.safe_load(sys.stdin)))'], {
      input: yaml,
    }).toString(),
  );

/** docker-compose's duration strings ("45s", "1m30s") in milliseconds. */
function durationMs(value: string): number {
  const units: Record<string, number> = { h: 3_600_000, m: 60_000, s: 1000, ms: 1 };
  const parts = [...value.matchAll(/(\d+(?:\.\d+)?)(ms|h|m|s)/g)];
  expect(parts.map((p) => p[0]).join(''), value).toBe(value);
  return parts.reduce((sum, [, n, unit]) => sum + Number(n) * units[unit], 0);
}

/** Runs a compose health check's CMD here, with the container's environment. */
function probe(test: string[], env: Record<string, string>): Promise<number> {
  expect(test[0]).toBe('CMD');
  const [command, ...args] = test.slice(1);
  expect(command).toBe('node');
  return new Promise((resolve) =>
    execFile(process.execPath, args, { env: { PATH: process.env.PATH!, ...env }, timeout: 20_000 }, (error) =>
      resolve(error ? Number(error.code ?? 1) : 0),
    ),
  );
}

const running: ServiceProcess[] = [];
afterAll(async () => {
  await Promise.all(running.map((p) => p.stop()));
});

describe.skipIf(missingPackage('dockerCompose'))('docker-compose.yml', () => {
  const resolved = composeConfig({ POSTGRES_PASSWORD: 'pw-for-the-test' });
  const services = resolved.code === 0 ? parseYaml(resolved.stdout).services : {};
  const env = (name: string): Record<string, string> => services[name]?.environment ?? {};

  it('is valid for docker-compose, and refuses to start without a PostgreSQL password', () => {
    expect(resolved.code, resolved.stderr).toBe(0);
    expect(Object.keys(services).sort()).toEqual(['api', 'bootstrap', 'postgres', 'redis', 'worker']);
    const missing = composeConfig({});
    expect(missing.code).not.toBe(0);
    expect(missing.stderr).toContain('set POSTGRES_PASSWORD in .env');
  });

  it('gives the API and the worker settings the service accepts', () => {
    for (const name of ['api', 'worker', 'bootstrap']) {
      for (const variable of Object.keys(env(name)))
        expect(Object.keys(SETTINGS_SCHEMA.properties), `${name}: ${variable}`).toContain(variable);
      expect(() => loadConfig(env(name)), name).not.toThrow();
    }
    expect(env('api').DATABASE_URL).toBe('postgres://postgres:pw-for-the-test@postgres:5432/analytics');
    expect(env('worker').REDIS_URL).toBe('redis://redis:6379');
  });

  it('passes every setting from .env to the API, the worker and bootstrap (empty: the default)', () => {
    // Set by the file itself, per service: the addresses of its PostgreSQL and Redis, where the API listens.
    const own = new Set([
      'DATABASE_URL',
      'REDIS_URL',
      'HOST',
      'PORT',
      'SERVICE_NAME',
      'NODE_ENV',
      'VALIDATE_RESPONSES',
    ]);
    const settings = Object.keys(SETTINGS_SCHEMA.properties).filter((name) => !own.has(name));
    const chosen = Object.fromEntries(settings.map((name) => [name, `value-of-${name}`]));
    const withEnv = composeConfig({ POSTGRES_PASSWORD: 'pw-for-the-test', ...chosen });
    expect(withEnv.code, withEnv.stderr).toBe(0);
    const configured = parseYaml(withEnv.stdout).services;
    for (const service of ['api', 'worker', 'bootstrap'])
      for (const name of settings)
        expect(configured[service].environment[name], `${service}: ${name}`).toBe(`value-of-${name}`);
    // And none set: each service starts with its defaults.
    for (const service of ['api', 'worker', 'bootstrap']) expect(() => loadConfig(env(service))).not.toThrow();
  });

  it('restarts the long-running services, runs bootstrap once before the API and worker', () => {
    for (const name of ['postgres', 'redis', 'api', 'worker'])
      expect(services[name].restart, name).toBe('unless-stopped');
    expect(services.bootstrap.restart).toBe('no');
    expect(services.bootstrap.command).toEqual([
      'node',
      'scripts/bootstrap.ts',
      '--if-new',
      '--email',
      'admin@example.com',
    ]);
    for (const name of ['api', 'worker']) {
      expect(services[name].depends_on, name).toEqual({
        bootstrap: { condition: 'service_completed_successfully' },
        postgres: { condition: 'service_healthy' },
        redis: { condition: 'service_healthy' },
      });
    }
    expect(services.bootstrap.depends_on).toEqual({ postgres: { condition: 'service_healthy' } });
  });

  it('keeps data in named volumes and installs dependencies in an image, never into the host', () => {
    const mounts = (name: string) =>
      (services[name].volumes ?? []).map((v: any) =>
        typeof v === 'string' ? v.replace(/:rw$/, '') : `${v.source}:${v.target}`,
      );
    expect(mounts('postgres')).toEqual(['pgdata:/var/lib/postgresql/data']);
    expect(mounts('redis')).toEqual(['redisdata:/data']);
    expect(services.redis.command).toEqual(['redis-server', '--appendonly', 'yes']);
    // The API and the worker share one named volume, the access-export archives (ACCESS_EXPORT_DIR); no host folder.
    expect(mounts('api')).toEqual(['accessexports:/app/data/access-exports']);
    expect(mounts('worker')).toEqual(['accessexports:/app/data/access-exports']);
    expect(services.bootstrap.volumes).toBeUndefined();
    for (const name of ['bootstrap', 'api', 'worker']) {
      expect(services[name].build.context, name).toBe(root.replace(/\/$/, ''));
    }
    const dockerfile = readFileSync(join(root, 'Dockerfile'), 'utf8');
    expect(dockerfile).toMatch(/^FROM node:24/m);
    expect(dockerfile).toMatch(/^RUN npm ci --omit=dev/m);
    const ignored = readFileSync(join(root, '.dockerignore'), 'utf8').split('\n');
    for (const entry of ['node_modules', '.env', '.git']) expect(ignored).toContain(entry);
    expect(existsSync(join(root, 'package-lock.json'))).toBe(true);
  });

  it('publishes ports on 127.0.0.1 only', () => {
    const published = Object.entries(services).flatMap(([name, s]: [string, any]) =>
      (s.ports ?? []).map((p: any) => [name, p]),
    );
    expect(published.map(([name]) => name).sort()).toEqual(['api', 'postgres', 'redis']);
    for (const [name, port] of published) {
      const hostIp = typeof port === 'string' ? port.split(':')[0] : port.host_ip;
      expect(hostIp, `${name}: ${JSON.stringify(port)}`).toBe('127.0.0.1');
    }
  });

  it('gives the worker longer than its shutdown timeout to stop, and the API longer than its drain', () => {
    const shutdownMs = loadConfig(env('worker')).worker.shutdownTimeoutMs;
    expect(shutdownMs).toBe(30_000);
    expect(durationMs(services.worker.stop_grace_period)).toBeGreaterThan(shutdownMs);
    expect(durationMs(services.api.stop_grace_period)).toBeGreaterThan(10_000);
  });

  it("health checks that really probe: the API's answers from a running API and fails without one", async () => {
    const test = services.api.healthcheck.test;
    const api = await startApiProcess({});
    running.push(api);
    const port = new URL(api.baseUrl).port;
    expect(await probe(test, { PORT: port })).toBe(0);
    await api.stop();
    expect(await probe(test, { PORT: port })).toBe(1);
  }, 90_000);

  it("health checks that really probe: the worker's answers from a running worker's metrics port and fails without", async () => {
    const test = services.worker.healthcheck.test;
    const port = String(await freePort());
    expect(env('worker').WORKER_METRICS_PORT).toBeDefined();
    expect(await probe(test, { WORKER_METRICS_PORT: port })).toBe(1);
    const worker = startWorkerProcess({ WORKER_METRICS_PORT: port, REDIS_PREFIX: `compose-${port}` });
    running.push(worker);
    await eventually(
      async () => {
        if (worker.child.exitCode !== null) throw new Error(`worker exited: ${worker.output()}`);
        return (await probe(test, { WORKER_METRICS_PORT: port })) === 0 || null;
      },
      60_000,
      500,
    );
    await worker.stop();
    expect(await probe(test, { WORKER_METRICS_PORT: port })).toBe(1);
  }, 90_000);

  describe('with ClickHouse (docker-compose.clickhouse.yml)', () => {
    const FILES = ['docker-compose.yml', 'docker-compose.clickhouse.yml'];
    const both = composeConfig({ POSTGRES_PASSWORD: 'pw-for-the-test', CLICKHOUSE_PASSWORD: 'ch-pw' }, FILES);
    const withClickHouse = both.code === 0 ? parseYaml(both.stdout).services : {};

    it('adds a pinned ClickHouse server with a health check, its volume and the open files its docs ask for', () => {
      expect(both.code, both.stderr).toBe(0);
      expect(Object.keys(withClickHouse).sort()).toEqual([
        'api',
        'bootstrap',
        'clickhouse',
        'postgres',
        'redis',
        'worker',
      ]);
      const clickhouse = withClickHouse.clickhouse;
      expect(clickhouse.image).toMatch(/^clickhouse\/clickhouse-server:\d+\.\d+/);
      expect(clickhouse.restart).toBe('unless-stopped');
      expect(clickhouse.healthcheck.test.join(' ')).toContain('http://127.0.0.1:8123/ping');
      expect(clickhouse.ulimits.nofile).toEqual({ soft: 262144, hard: 262144 });
      const volumes: string[] = clickhouse.volumes.map((v: any) =>
        typeof v === 'string' ? v : `${v.source}:${v.target}`,
      );
      expect(volumes.some((v) => v.startsWith('clickhousedata:/var/lib/clickhouse'))).toBe(true);
      for (const port of clickhouse.ports) {
        const hostIp = typeof port === 'string' ? port.split(':')[0] : port.host_ip;
        expect(hostIp).toBe('127.0.0.1');
      }
      const missing = composeConfig({ POSTGRES_PASSWORD: 'pw-for-the-test' }, FILES);
      expect(missing.code).not.toBe(0);
      expect(missing.stderr).toContain('set CLICKHOUSE_PASSWORD in .env');
    });

    it('points the API, the worker and bootstrap at it once it is healthy, with settings the service accepts', () => {
      for (const name of ['api', 'worker', 'bootstrap']) {
        const service = withClickHouse[name];
        expect(service.depends_on.clickhouse, name).toEqual({ condition: 'service_healthy' });
        const config = loadConfig(service.environment);
        expect(config.events.engine, name).toBe('clickhouse');
        expect(config.events.clickhouseUrl, name).toBe('http://analytics:ch-pw@clickhouse:8123');
        expect(config.events.clickhouseDatabase, name).toBe(withClickHouse.clickhouse.environment.CLICKHOUSE_DB);
        // The rest of the environment stays the main file's.
        expect(service.environment.DATABASE_URL).toBe('postgres://postgres:pw-for-the-test@postgres:5432/analytics');
      }
      expect(withClickHouse.api.depends_on.bootstrap).toEqual({ condition: 'service_completed_successfully' });
      // bootstrap applies ClickHouse's schema too before the API and the worker start.
      expect(withClickHouse.bootstrap.command.join(' ')).toMatch(
        /node scripts\/migrate\.ts && exec node scripts\/bootstrap\.ts --if-new/,
      );
    });
  });

  it('bootstrap --if-new migrates and succeeds on an install that has users, creating nothing', async () => {
    const orm = await initOrm();
    await createAccount(orm);
    // Had it bootstrapped, this user would exist now.
    const email = `bootstrap-${randomUUID().slice(0, 8)}@example.com`;
    const run = await new Promise<{ code: number; stdout: string; stderr: string }>((resolve) =>
      execFile(
        process.execPath,
        ['scripts/bootstrap.ts', '--if-new', '--email', email],
        { cwd: root, env: { ...process.env, LOG_LEVEL: 'silent' } },
        (error, stdout, stderr) => resolve({ code: error ? Number(error.code ?? 1) : 0, stdout, stderr }),
      ),
    );
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout.trim()).toBe('This install already has users: migrated, nothing else to do.');
    expect(await sql(orm, 'select id from app_user where email = ?', [email])).toEqual([]);
    await orm.close();
  }, 60_000);
});
