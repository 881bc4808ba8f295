// Every setting goes through one validated schema (shared/platform/config.ts): a typo stops start-up naming the
// variable, nothing else reads process.env, and README's Configuration table lists exactly the schema.
import { execFile } from 'node:child_process';
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { loadConfig, SETTINGS_SCHEMA } from '../../../shared/platform/config.ts';

const root = fileURLToPath(new URL('../../..', import.meta.url));
const names = () => Object.keys(SETTINGS_SCHEMA.properties).sort();

describe('configuration', () => {
  it('refuses a misspelt boolean, naming the variable, where it used to read it as false', () => {
    expect(() => loadConfig({ RATE_LIMIT_ENABLED: 'ture' })).toThrow('RATE_LIMIT_ENABLED must be true or false');
    expect(() => loadConfig({ RATE_LIMIT_ENABLED: 'ture' })).toThrow('got "ture"');
  });

  it('reads TRUST_PROXY as the number of proxies in front, refusing the old boolean spelling', () => {
    expect(loadConfig({ TRUST_PROXY: '1' }).trustProxy).toBe(1);
    expect(loadConfig({ TRUST_PROXY: '2' }).trustProxy).toBe(2);
    expect(loadConfig({ TRUST_PROXY: '0' }).trustProxy).toBe(0);
    // "true" trusted every entry, the client's own among them: a start-up error, not a guess.
    expect(() => loadConfig({ TRUST_PROXY: 'true' })).toThrow('TRUST_PROXY must be an integer, got "true"');
    expect(() => loadConfig({ TRUST_PROXY: '-1' })).toThrow('TRUST_PROXY must be at least 0');
  });

  it('refuses a pool of one connection: the worker reads events on a second while its transaction holds one', () => {
    expect(() => loadConfig({ DATABASE_POOL_MAX: '1' })).toThrow('DATABASE_POOL_MAX must be at least 2');
    expect(loadConfig({ DATABASE_POOL_MAX: '2' }).databasePoolMax).toBe(2);
  });

  it('reads the usual spellings of a boolean', () => {
    for (const yes of ['true', 'TRUE', '1', 'yes', 'on'])
      expect(loadConfig({ RATE_LIMIT_ENABLED: yes }).rateLimit.enabled).toBe(true);
    for (const no of ['false', 'False', '0', 'no', 'off'])
      expect(loadConfig({ RATE_LIMIT_ENABLED: no }).rateLimit.enabled).toBe(false);
    expect(loadConfig({ ORM_DEBUG: 'on' }).ormDebug).toBe(true);
  });

  it('refuses malformed numbers, out-of-range values, crons, URLs and log levels, each named', () => {
    const cases: [Record<string, string>, string][] = [
      [{ DELETION_CHUNK_SIZE: 'lots' }, 'DELETION_CHUNK_SIZE must be an integer, got "lots"'],
      [{ PORT: '80.5' }, 'PORT must be an integer, got "80.5"'],
      [{ PORT: '70000' }, 'PORT must be at most 65535, got "70000"'],
      [{ WORKER_CONCURRENCY: '0' }, 'WORKER_CONCURRENCY must be at least 1, got "0"'],
      [{ DELETION_OFF_PEAK_CRON: '0 25 * * *' }, 'DELETION_OFF_PEAK_CRON must be a cron pattern, got "0 25 * * *"'],
      [{ STATISTICS_REFRESH_CRON: 'hourly' }, 'STATISTICS_REFRESH_CRON must be a cron pattern, got "hourly"'],
      [
        { LOG_LEVEL: 'verbose' },
        'LOG_LEVEL must be one of fatal, error, warn, info, debug, trace, silent, got "verbose"',
      ],
      [
        { REDIS_CLUSTER_NODES: '10.0.0.1:7000,10.0.0.2' },
        'REDIS_CLUSTER_NODES must be host:port,host:port,…, got "10.0.0.2"',
      ],
      [{ DATABASE_URL: 'postgress://u@db/analytics' }, 'DATABASE_URL must be a postgres:// URL'],
      [{ REDIS_URL: 'localhost:6379' }, 'REDIS_URL must be a redis:// URL'],
      [{ EVENT_STORE: 'druid' }, 'EVENT_STORE must be one of postgres, clickhouse, got "druid"'],
      [{ CLICKHOUSE_URL: 'tcp://ch:9000' }, 'CLICKHOUSE_URL must be an http:// or https:// URL, got "tcp://ch:9000"'],
      [
        { CLICKHOUSE_DATABASE: 'a-b' },
        'CLICKHOUSE_DATABASE must be a name of letters, digits and underscores, got "a-b"',
      ],
    ];
    for (const [env, message] of cases) expect(() => loadConfig(env), JSON.stringify(env)).toThrow(message);
  });

  it('names every bad variable at once, and never echoes a password', () => {
    let message = '';
    try {
      loadConfig({ PORT: 'x', JOB_ATTEMPTS: 'y', DATABASE_DIRECT_URL: 'mysql://app:hunter2@db/analytics' });
    } catch (error) {
      message = (error as Error).message;
    }
    expect(message).toContain('PORT must be an integer');
    expect(message).toContain('JOB_ATTEMPTS must be an integer');
    expect(message).toContain('DATABASE_DIRECT_URL must be a postgres:// URL, got "mysql://app:***@db/analytics"');
    expect(message).not.toContain('hunter2');
  });

  it('treats an empty value as unset and keeps the documented defaults', () => {
    const config = loadConfig({ PORT: '', RATE_LIMIT_ENABLED: '' });
    expect(config).toMatchObject({
      databaseUrl: 'postgres://postgres@127.0.0.1:5432/analytics',
      databaseDirectUrl: 'postgres://postgres@127.0.0.1:5432/analytics',
      databasePoolMax: 10,
      port: 8000,
      host: '127.0.0.1',
      logLevel: 'info',
      trustProxy: 0,
      adminUser: 'admin',
      enqueueTimeoutMs: 1000,
      rateLimit: { enabled: true, perMinute: 480, perHour: 4800 },
      worker: { concurrency: 2, shutdownTimeoutMs: 30_000, lockDurationMs: 30_000, metricsPort: 0 },
      deletion: { weeklyCron: '0 5 * * 0', chunkSize: 100_000, leaseSeconds: 30, batchSize: 1000 },
      maintenance: { eventPartitionsAhead: 2, statisticsRefreshRows: 10_000 },
      events: { engine: 'postgres', clickhouseUrl: 'http://127.0.0.1:8123', clickhouseDatabase: 'analytics' },
    });
    expect(loadConfig({ DATABASE_URL: 'postgres://a@b/c' }).databaseDirectUrl).toBe('postgres://a@b/c');
    expect(loadConfig({ NODE_ENV: 'test' }).logLevel).toBe('silent');
    expect(loadConfig({ NODE_ENV: 'test', LOG_LEVEL: 'warn' }).logLevel).toBe('warn');
  });

  it('stops a process at start-up with one line naming the variable, no stack trace', async () => {
    const env = { ...process.env, RATE_LIMIT_ENABLED: 'ture' };
    const run = await new Promise<{ code: number | null; stderr: string }>((resolve) =>
      execFile(process.execPath, ['api/main.ts'], { cwd: root, env, timeout: 20_000 }, (error, _out, stderr) =>
        resolve({ code: error ? (error.code as number) : 0, stderr }),
      ),
    );
    expect(run.code).toBe(1);
    expect(run.stderr.trim()).toBe(
      'Configuration error: RATE_LIMIT_ENABLED must be true or false (1/0, yes/no, on/off), got "ture"',
    );
  });

  it('is the only reader of process.env in the service code', () => {
    const files: string[] = [];
    const walk = (dir: string) => {
      for (const name of readdirSync(join(root, dir))) {
        const path = join(dir, name);
        if (statSync(join(root, path)).isDirectory()) walk(path);
        else if (path.endsWith('.ts')) files.push(path);
      }
    };
    for (const dir of ['api', 'shared', 'worker', 'scripts']) walk(dir);
    const readers = files.filter((file) => {
      // Handing the environment on to a child process (`...process.env`) reads no setting.
      const source = readFileSync(join(root, file), 'utf8').replaceAll('...process.env', '');
      return /process\.env\b|\benv(Int|Bool|Cron)\(/.test(source);
    });
    expect(files.length).toBeGreaterThan(50);
    expect(readers).toEqual(['shared/platform/config.ts']);
  });

  it("matches README's Configuration table, variable for variable and default for default", () => {
    const readme = readFileSync(join(root, 'README.md'), 'utf8');
    const section = readme.slice(
      readme.indexOf('## Configuration'),
      readme.indexOf('\n## ', readme.indexOf('## Configuration') + 1),
    );
    const rows = section.split('\n').filter((line) => /^\| `[A-Z_]+`/.test(line));
    const documented = new Map(
      rows.map((row) => {
        const [, name, fallback] = row.split('|').map((cell) => cell.trim());
        return [name.replaceAll('`', ''), fallback];
      }),
    );
    expect([...documented.keys()].sort()).toEqual(names());
    for (const [name, schema] of Object.entries(SETTINGS_SCHEMA.properties) as [string, { default?: unknown }][]) {
      const expected = schema.default === undefined ? documented.get(name) : `\`${schema.default}\``;
      expect(documented.get(name), name).toBe(expected);
    }
  });
});
