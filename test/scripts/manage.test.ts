// The management command (`npm run manage -- …`) against the test database; the keys it makes are
// then used on the running API. Most commands run in this process (`main`, as the program calls it);
// those that need another environment, the progress test and the plain-text forms run as real processes.
import { execFile, spawn } from 'node:child_process';
import { mkdtempSync, rmdirSync, symlinkSync, unlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrationsList } from '../../shared/platform/db/migrations/index.ts';
import { OPERATOR_DELETION_FILTERS, recordDeletionRequests } from '../../shared/deletions/store.ts';
import { createQueues } from '../../shared/platform/queues.ts';
import { createApiRedis } from '../../shared/platform/redis.ts';
import { main } from '../../scripts/manage.ts';
import { call, eventually, startApi, uniqueRedisPrefix, type TestApi } from '../helpers.ts';

const root = fileURLToPath(new URL('../..', import.meta.url));
let api: TestApi;

beforeAll(async () => {
  api = await startApi();
});
afterAll(() => api.close());

interface Run {
  code: number;
  stdout: string;
  stderr: string;
  json: any;
}

/** The command with --json, in this process: what it would print, and its exit code. */
async function manage(...args: string[]): Promise<Run> {
  const out: string[] = [];
  const err: string[] = [];
  const code = await main([...args, '--json'], { out: (text) => out.push(text), err: (text) => err.push(text) });
  const stdout = out.map((line) => `${line}\n`).join('');
  let json: any = null;
  try {
    json = JSON.parse(stdout);
  } catch {}
  return { code, stdout, stderr: err.map((line) => `${line}\n`).join(''), json };
}

/** The command as an operator types it, with extra environment. */
function run(args: string[], env: Record<string, string> = {}): Promise<Run> {
  return new Promise((resolve) => {
    const options = { cwd: root, env: { ...process.env, LOG_LEVEL: 'silent', ...env } };
    execFile(process.execPath, ['scripts/manage.ts', ...args], options, (error, stdout, stderr) => {
      let json: any = null;
      try {
        json = JSON.parse(stdout);
      } catch {}
      resolve({ code: error ? Number(error.code ?? 1) : 0, stdout, stderr, json });
    });
  });
}

async function ok(...args: string[]) {
  const run = await manage(...args);
  expect(run.code, `${args.join(' ')}: ${run.stderr}`).toBe(0);
  return run.json;
}

const get = (path: string, key: string) => call(api.baseUrl, 'GET', path, { key });

/** An organization with two projects and an owner, made by the command. */
async function setUp() {
  const suffix = randomUUID().slice(0, 8);
  const org = await ok('org', 'create', '--name', `Cmd ${suffix}`);
  const web = await ok('project', 'create', '--org', org.id, '--name', 'Web', '--timezone', 'Europe/Berlin');
  const app = await ok('project', 'create', '--org', org.id, '--name', 'App');
  const email = `ops-${suffix}@example.com`;
  await ok('user', 'create', '--email', email, '--org', org.id, '--level', 'owner');
  return { org, web, app, email };
}

// Each test spawns the command several times; on a busy two-core machine one run can take 10–25 s.
describe('npm run manage', { timeout: 240_000 }, () => {
  it('creates a key with exactly its scopes and project; lists it masked; roll and revoke take effect at once', async () => {
    const { org, web, app, email } = await setUp();
    expect(web).toMatchObject({ name: 'Web', organization: org.id, api_token: expect.stringMatching(/^phc_/) });
    const key = await ok(
      'key',
      'create',
      '--user',
      email,
      '--label',
      'reader',
      '--scopes',
      'person:read',
      '--projects',
      String(web.id),
    );
    expect(key.value).toMatch(/^phx_/);

    expect((await get(`/api/projects/${web.id}/persons/`, key.value)).status).toBe(200);
    const wrongProject = await get(`/api/projects/${app.id}/persons/`, key.value);
    expect(wrongProject.status).toBe(403);
    expect(wrongProject.body.detail).toBe(`API key does not have access to the requested project: ID ${app.id}.`);
    const missingScope = await get(`/api/projects/${web.id}/experiments/`, key.value);
    expect(missingScope.status).toBe(403);
    expect(missingScope.body.detail).toBe("API key missing required scope 'experiment:read'");
    expect(
      (
        await call(api.baseUrl, 'POST', `/api/projects/${web.id}/persons/bulk_delete/`, {
          key: key.value,
          body: { ids: [] },
        })
      ).body.detail,
    ).toBe("API key missing required scope 'person:write'");
    const current = (await get('/api/personal_api_keys/@current', key.value)).body;
    expect(current).toMatchObject({
      id: key.id,
      label: 'reader',
      scopes: ['person:read'],
      scoped_teams: [web.id],
      scoped_organizations: [],
      value: null,
    });

    const listed = await manage('key', 'list', '--user', email);
    expect(listed.json).toEqual([
      expect.objectContaining({
        id: key.id,
        label: 'reader',
        mask_value: `phx_...${key.value.slice(-4)}`,
        scopes: ['person:read'],
        projects: [web.id],
        organizations: [],
      }),
    ]);
    expect(listed.stdout).not.toContain(key.value);
    const table = await new Promise<string>((resolve) =>
      execFile(process.execPath, ['scripts/manage.ts', 'key', 'list', '--user', email], { cwd: root }, (_e, stdout) =>
        resolve(stdout),
      ),
    );
    expect(table).toContain('phx_...');
    expect(table).not.toContain(key.value);

    const rolled = await ok('key', 'roll', '--key', key.id);
    expect(rolled.value).not.toBe(key.value);
    expect((await get(`/api/projects/${web.id}/persons/`, key.value)).status).toBe(401);
    expect((await get(`/api/projects/${web.id}/persons/`, rolled.value)).status).toBe(200);
    expect((await get('/api/personal_api_keys/@current', rolled.value)).body.last_rolled_at).not.toBeNull();

    await ok('key', 'revoke', '--key', key.id);
    const revoked = await get(`/api/projects/${web.id}/persons/`, rolled.value);
    expect(revoked.status).toBe(401);
    expect(revoked.body.code).toBe('authentication_failed');
    expect((await manage('key', 'revoke', '--key', key.id)).code).toBe(1);
  });

  it('organization-scoped keys see only their organization; deactivating the user is 401 for every key', async () => {
    const { org, web, app, email } = await setUp();
    const elsewhere = await ok('org', 'create', '--name', 'Elsewhere');
    const far = await ok('project', 'create', '--org', elsewhere.id, '--name', 'Far');
    expect(
      (await manage('key', 'create', '--user', email, '--label', 'x', '--scopes', '*', '--orgs', elsewhere.id)).stderr,
    ).toContain('You must be a member of all organizations/teams that you are scoping the key to.');
    await ok('org', 'add-member', '--org', elsewhere.id, '--user', email);
    const scoped = await ok('key', 'create', '--user', email, '--label', 'org', '--scopes', '*', '--orgs', org.id);
    const all = await ok('key', 'create', '--user', email, '--label', 'all', '--scopes', '*');
    const listIds = async (path: string, key: string) =>
      (await get(path, key)).body.results.map((r: any) => r.id).sort();
    expect(await listIds('/api/projects/', scoped.value)).toEqual([web.id, app.id].sort());
    expect(await listIds('/api/organizations/', scoped.value)).toEqual([org.id]);
    expect(await listIds('/api/projects/', all.value)).toEqual([web.id, app.id, far.id].sort());
    expect((await get(`/api/projects/${far.id}/persons/`, scoped.value)).status).toBe(403);
    expect((await get(`/api/projects/${far.id}/persons/`, all.value)).status).toBe(200);

    await ok('user', 'deactivate', '--user', email);
    for (const key of [scoped.value, all.value]) expect((await get('/api/users/@me/', key)).status).toBe(401);
    await ok('user', 'activate', '--user', email);
    expect((await get('/api/users/@me/', all.value)).status).toBe(200);
  });

  it('rotates a project token: SDKs with the old one get 401', async () => {
    const { web } = await setUp();
    const send = (token: string) =>
      fetch(`${api.baseUrl}/capture/`, {
        method: 'POST',
        body: JSON.stringify({ api_key: token, event: 'e', distinct_id: 'd' }),
      }).then((r) => r.status);
    expect(await send(web.api_token)).toBe(200);
    const rotated = await ok('project', 'rotate-token', '--project', String(web.id));
    expect(rotated.api_token).toMatch(/^phc_/);
    expect(await send(web.api_token)).toBe(401);
    expect(await send(rotated.api_token)).toBe(200);
  });

  it('refuses bad input with the reason and a non-zero exit, and creates nothing', async () => {
    const { org, web, email } = await setUp();
    const cases: [string[], number, string][] = [
      [
        ['key', 'create', '--user', email, '--label', 'x', '--scopes', 'person:read,persons:write'],
        1,
        'Invalid scope: persons:write',
      ],
      [['key', 'create', '--user', email, '--label', '   ', '--scopes', '*'], 1, 'label: This field may not be blank.'],
      [['key', 'create', '--user', email, '--label', 'x'.repeat(41), '--scopes', '*'], 1, 'no more than 40 characters'],
      [['key', 'create', '--user', email, '--label', 'x', '--scopes', ','], 1, 'scopes: This field is required.'],
      [
        ['key', 'create', '--user', email, '--label', 'x', '--scopes', '*', '--projects', 'abc'],
        1,
        'Invalid project id: abc',
      ],
      [
        ['key', 'create', '--user', email, '--label', 'x', '--scopes', '*', '--projects', '999999999'],
        1,
        'You must be a member',
      ],
      [
        ['key', 'create', '--user', 'nobody@example.com', '--label', 'x', '--scopes', '*'],
        1,
        'No user with the email nobody@example.com',
      ],
      [['key', 'create', '--user', email, '--label', 'x'], 2, '--scopes is required'],
      [
        ['key', 'create', '--user', email, '--label', 'x', '--scopes', '*', '--color', 'red'],
        2,
        "Unknown option '--color'",
      ],
      [['key', 'roll', '--key', 'nope'], 1, 'No personal API key with id nope'],
      [['user', 'create', '--email', 'not-an-email', '--org', org.id], 1, 'Enter a valid email address'],
      [['user', 'create', '--email', email, '--org', org.id], 1, 'There is already a user with the email'],
      [
        ['user', 'create', '--email', 'x@example.com', '--org', org.id, '--level', 'boss'],
        1,
        'Invalid membership level: boss',
      ],
      [['project', 'create', '--org', 'not-a-uuid', '--name', 'P'], 1, 'No organization with id not-a-uuid'],
      [
        ['project', 'create', '--org', org.id, '--name', 'P', '--timezone', 'Mars/Olympus'],
        1,
        '"Mars/Olympus" is not a valid choice.',
      ],
      [['project', 'rotate-token', '--project', '999999999'], 1, 'No project with id 999999999'],
      [['org', 'create', '--name', ' '], 1, 'name: This field may not be blank.'],
      [['org', 'destroy'], 2, 'Unknown command: org destroy'],
      [[], 2, 'Usage: npm run manage'],
    ];
    for (const [args, code, message] of cases) {
      const run = await manage(...args);
      expect(run.code, args.join(' ')).toBe(code);
      expect(run.stderr, args.join(' ')).toContain(message);
      expect(run.stdout, args.join(' ')).toBe('');
    }
    expect(await ok('key', 'list', '--user', email)).toEqual([]);
    expect((await ok('project', 'list', '--org', org.id)).map((p: any) => p.id)).toEqual([web.id, expect.any(Number)]);
  }, 300_000);

  it('indexes a person property, lists the index with its key, refuses a bad kind, and drops it', async () => {
    const key = `cli-${randomUUID().slice(0, 8)}`;
    const made = await ok('property', 'index', '--key', key, '--kind', 'number');
    expect(made).toEqual([
      {
        name: expect.stringMatching(/^person_property_number_/),
        kind: 'number',
        key,
        valid: true,
        bytes: expect.any(Number),
      },
    ]);
    expect((await ok('property', 'indexes')).filter((index: any) => index.key === key)).toEqual(made);
    const bad = await manage('property', 'index', '--key', key, '--kind', 'bogus');
    expect(bad.code).toBe(1);
    expect(bad.stderr).toContain('Invalid kind: bogus (number, text, date or all)');
    expect(await ok('property', 'unindex', '--key', key)).toEqual({ dropped: [made[0].name] });
    expect((await ok('property', 'indexes')).filter((index: any) => index.key === key)).toEqual([]);
  }, 300_000);

  it("shows an index build's progress on stderr while it runs (from pg_stat_progress_create_index)", async () => {
    const key = `cli-progress-${randomUUID().slice(0, 8)}`;
    // A transaction that writes to person holds the concurrent build in its "waiting for writers" phase.
    const writer = new pg.Client({ connectionString: process.env.DATABASE_URL });
    await writer.connect();
    try {
      await writer.query('begin');
      await writer.query('lock table person in row exclusive mode');
      const child = spawn(
        process.execPath,
        ['scripts/manage.ts', 'property', 'index', '--key', key, '--kind', 'number'],
        {
          cwd: root,
          env: { ...process.env, LOG_LEVEL: 'silent' },
        },
      );
      let stderr = '';
      child.stderr.on('data', (chunk) => (stderr += chunk));
      const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
      await eventually(async () => (/waiting for writers before build/.test(stderr) ? true : null), 60_000);
      expect(stderr).toMatch(/^(person_property_number_\w+|index): waiting for writers before build \d+% \(0\/1\)$/m);
      await writer.query('commit');
      expect(await exited).toBe(0);
    } finally {
      await writer.end();
    }
    expect((await ok('property', 'unindex', '--key', key)).dropped).toHaveLength(1);
  }, 300_000);

  it("stops at ten keys per user, with PostHog's message", async () => {
    const { email } = await setUp();
    for (let i = 0; i < 10; i++)
      await ok('key', 'create', '--user', email, '--label', `k${i}`, '--scopes', 'person:read');
    const eleventh = await manage('key', 'create', '--user', email, '--label', 'k10', '--scopes', 'person:read');
    expect(eleventh.code).toBe(1);
    expect(eleventh.stderr).toContain(
      'You can only have 10 personal API keys. Remove an existing key before creating a new one.',
    );
  }, 300_000);
});

const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/;
const baseUrl = new URL(process.env.DATABASE_URL!);
const databaseUrl = (name: string) => Object.assign(new URL(baseUrl), { pathname: `/${name}` }).toString();

async function admin<T>(query: string, params: unknown[] = []): Promise<T[]> {
  const client = new pg.Client({ connectionString: databaseUrl('postgres') });
  await client.connect();
  try {
    return (await client.query(query, params)).rows;
  } finally {
    await client.end();
  }
}

describe('npm run manage: help, databases, outages', () => {
  it("prints usage on stdout and exits 0 for help, --help and a command's --help", async () => {
    const runs = await Promise.all(
      [['help'], ['--help'], ['-h']].map(async (args) => [args, await run(args)] as const),
    );
    for (const [args, help] of runs) {
      expect(help.code, args.join(' ')).toBe(0);
      expect(help.stderr).toBe('');
      expect(help.stdout).toContain('Usage: npm run manage -- <command> [options] [--json]');
      for (const command of ['queue status', 'migration status', 'deletion list', 'schedule set'])
        expect(help.stdout).toContain(`  ${command}`);
    }
    const one = await run(['key', 'create', '--help']);
    expect(one.code).toBe(0);
    expect(one.stdout).toContain('Usage: npm run manage -- key create --user EMAIL --label LABEL');
    // Reached through a symbolic link (a deployment's `current` directory), it is still the program.
    const dir = mkdtempSync(join(tmpdir(), 'manage-link-'));
    const link = join(dir, 'current');
    symlinkSync(root, link);
    const linked = await new Promise<{ code: number; stdout: string }>((resolve) =>
      execFile(process.execPath, [join(link, 'scripts/manage.ts'), 'help'], { cwd: link }, (error, stdout) =>
        resolve({ code: error ? Number(error.code ?? 1) : 0, stdout }),
      ),
    ).finally(() => {
      unlinkSync(link); // the link itself, never what it points to
      rmdirSync(dir);
    });
    expect(linked.code).toBe(0);
    expect(linked.stdout).toContain('Usage: npm run manage -- <command> [options] [--json]');
  }, 120_000);

  it('never creates a database: a misspelt name is an error for reads and writes alike, and stays absent', async () => {
    const name = `analytics_typo_${randomUUID().slice(0, 8)}`;
    const commands = [
      ['org', 'list'],
      ['deletion', 'list'],
      ['schedule', 'list'],
      ['migration', 'status'],
      ['org', 'create', '--name', 'X'],
    ];
    const runs = await Promise.all(
      commands.map(async (args) => [args, await run(args, { DATABASE_URL: databaseUrl(name) })] as const),
    );
    for (const [args, result] of runs) {
      expect(result.code, args.join(' ')).toBe(1);
      expect(result.stdout, args.join(' ')).toBe('');
      expect(result.stderr.trim(), args.join(' ')).toBe(
        `Error: database "${name}" does not exist at ${baseUrl.host}; check DATABASE_URL, or create and migrate it with \`npm run migrate\``,
      );
    }
    expect(await admin('select 1 from pg_database where datname = $1', [name])).toEqual([]);
  }, 120_000);

  it('never migrates: an empty database is refused with the pending count, and migration status lists them', async () => {
    const name = `analytics_empty_${randomUUID().slice(0, 8)}`;
    await admin(`create database ${name}`);
    try {
      const env = { DATABASE_URL: databaseUrl(name) };
      const commands = [
        ['user', 'list'],
        ['key', 'list'],
        ['schedule', 'list'],
        ['org', 'create', '--name', 'X'],
      ];
      const runs = await Promise.all(commands.map(async (args) => [args, await run(args, env)] as const));
      for (const [args, result] of runs) {
        expect(result.code, args.join(' ')).toBe(1);
        expect(result.stderr.trim(), args.join(' ')).toBe(
          `Error: database "${name}" is not migrated (${migrationsList.length} pending migrations); run \`npm run migrate\``,
        );
      }
      const status = await run(['migration', 'status', '--json'], env);
      expect(status.code, status.stderr).toBe(0);
      expect(status.json).toEqual(migrationsList.map((m) => ({ name: m.name, status: 'pending', applied_at: null })));
      const tables = await new Promise<string>((resolve) => {
        const client = new pg.Client({ connectionString: databaseUrl(name) });
        client.connect().then(async () => {
          resolve(
            (await client.query(`select count(*)::text as n from pg_tables where schemaname = 'public'`)).rows[0].n,
          );
          await client.end();
        });
      });
      expect(tables).toBe('0');
    } finally {
      await admin(`drop database if exists ${name} with (force)`);
    }
  }, 120_000);

  it('migration status lists every migration of this version as applied, with its time', async () => {
    const status = await manage('migration', 'status');
    expect(status.code, status.stderr).toBe(0);
    expect(status.json.map((m: any) => m.name)).toEqual(migrationsList.map((m) => m.name));
    for (const m of status.json)
      expect(m).toEqual({ name: m.name, status: 'applied', applied_at: expect.stringMatching(ISO) });
  });

  it('answers one line and exit 1 when PostgreSQL or Redis is down, not a stack trace', async () => {
    const pgDown = { DATABASE_URL: 'postgres://postgres:secret@127.0.0.1:1/analytics' };
    const commands = [
      ['org', 'list'],
      ['key', 'revoke', '--key', 'x'],
      ['migration', 'status'],
    ];
    const runs = await Promise.all(commands.map(async (args) => [args, await run(args, pgDown)] as const));
    for (const [args, result] of runs) {
      expect(result.code, args.join(' ')).toBe(1);
      expect(result.stderr.trim(), args.join(' ')).toMatch(
        /^Error: cannot reach PostgreSQL at 127\.0\.0\.1:1 \(.*ECONNREFUSED.*\)$/,
      );
      expect(result.stderr).not.toContain('secret');
    }
    const redisDown = await run(['queue', 'status'], { REDIS_URL: 'redis://127.0.0.1:1' });
    expect(redisDown.code).toBe(1);
    expect(redisDown.stderr.trim()).toMatch(/^Error: cannot reach Redis at 127\.0\.0\.1:1 \(.*ECONNREFUSED.*\)$/);
  }, 120_000);
});

describe('npm run manage: queues and typed JSON', () => {
  it('queue status counts jobs per state per queue and says how long the oldest has waited', async () => {
    const prefix = uniqueRedisPrefix();
    const redis = createApiRedis();
    const queues = createQueues(redis, { redisPrefix: prefix, jobs: { attempts: 1, backoffMs: 1 } });
    try {
      const minuteAgo = Date.now() - 60_000;
      await queues.deletions.add('delete', { deletionId: '1' }, { timestamp: minuteAgo });
      await queues.deletions.add('delete', { deletionId: '2' });
      await queues.deletions.add('delete', { deletionId: '3' }, { delay: 3_600_000 });
      await queues.maintenance.add('refresh', {}, { delay: 3_600_000 });
      const status = await run(['queue', 'status', '--json'], { REDIS_PREFIX: prefix });
      expect(status.code, status.stderr).toBe(0);
      const byQueue = Object.fromEntries(status.json.map((q: any) => [q.queue, q]));
      expect(Object.keys(byQueue).sort()).toEqual(['deletions', 'experiment-results', 'maintenance', 'webhooks']);
      expect(byQueue.deletions).toMatchObject({
        waiting: 2,
        active: 0,
        delayed: 1,
        failed: 0,
        completed: 0,
        paused: false,
      });
      expect(byQueue.deletions.oldest_waiting_since).toBe(new Date(minuteAgo).toISOString());
      expect(byQueue.deletions.oldest_waiting_seconds).toBeGreaterThanOrEqual(60);
      expect(byQueue.deletions.oldest_waiting_seconds).toBeLessThan(90);
      expect(byQueue.maintenance).toMatchObject({
        waiting: 0,
        delayed: 1,
        oldest_waiting_since: null,
        oldest_waiting_seconds: null,
      });
      expect(byQueue['experiment-results']).toMatchObject({ waiting: 0, delayed: 0, oldest_waiting_seconds: null });
      const text = await run(['queue', 'status'], { REDIS_PREFIX: prefix });
      expect(text.stdout.split('\n')[0]).toMatch(/^queue\s+waiting\s+prioritized\s+active/);
    } finally {
      await Promise.all(
        Object.values(queues).map(async (q) => {
          await q.obliterate({ force: true });
          await q.close();
        }),
      );
      redis.disconnect();
    }
  }, 120_000);

  it('--json answers arrays as arrays, numbers as numbers and times as ISO strings in every list', async () => {
    const { org, web, email } = await setUp();
    await ok(
      'key',
      'create',
      '--user',
      email,
      '--label',
      'typed',
      '--scopes',
      'person:read,experiment:read',
      '--projects',
      String(web.id),
    );
    const [orgRow] = (await ok('org', 'list')).filter((o: any) => o.id === org.id);
    expect(orgRow).toEqual({
      id: org.id,
      name: org.name,
      members: 1,
      projects: 2,
      created_at: expect.stringMatching(ISO),
    });
    const [project] = (await ok('project', 'list', '--org', org.id)).filter((p: any) => p.id === web.id);
    expect(project).toMatchObject({ id: web.id, organization: org.id, timezone: 'Europe/Berlin' });
    const [user] = (await ok('user', 'list')).filter((u: any) => u.email === email);
    expect(user).toEqual({ id: expect.any(Number), email, active: true, keys: 1, organizations: [org.id] });
    const [key] = await ok('key', 'list', '--user', email);
    expect(key).toMatchObject({
      scopes: ['person:read', 'experiment:read'],
      projects: [web.id],
      organizations: [],
      created_at: expect.stringMatching(ISO),
      last_used_at: null,
    });
    const all = await ok('key', 'create', '--user', email, '--label', 'all', '--scopes', '*');
    expect((await ok('key', 'list', '--user', email)).find((k: any) => k.id === all.id).scopes).toEqual(['*']);
    expect(await ok('org', 'add-member', '--org', org.id, '--user', email, '--level', 'admin')).toEqual({
      organization: org.id,
      user: email,
      level: 'admin',
    });

    const api2 = api.orm.em.fork();
    const [id] = await recordDeletionRequests(api2 as any, [
      {
        projectId: web.id,
        type: 'person_events',
        mode: 'weekly',
        key: randomUUID(),
        distinctIds: ['d'],
        createdById: null,
      },
    ]);
    const deletions = await ok('deletion', 'list', '--project', String(web.id));
    expect(deletions).toEqual([
      expect.objectContaining({
        id,
        project: web.id,
        status: 'pending',
        created_at: expect.stringMatching(ISO),
        attempts: 0,
        failures: 0,
        next_attempt_at: null,
      }),
    ]);
    const schedules = await ok('schedule', 'list');
    expect(schedules.length).toBeGreaterThan(3);
    for (const s of schedules) {
      expect(s).toEqual({
        id: expect.any(String),
        cron: expect.any(String),
        next_run: expect.stringMatching(ISO),
        // Queues spelt as everywhere else (metrics, the dashboard): the queue's own name.
        queue: expect.stringMatching(/^(deletions|experiment-results|maintenance)$/),
        job: expect.any(String),
        setting: expect.any(String),
      });
      expect(Date.parse(s.next_run)).toBeGreaterThan(Date.now() - 60_000);
    }
    const weekly = schedules.find((s: { id: string }) => s.id === 'deletion-weekly-batch');
    expect(new Date(weekly.next_run).getUTCDay()).toBe(0); // Sunday, 05:00 UTC by default
    expect(new Date(weekly.next_run).getUTCHours()).toBe(5);
    expect(schedules.find((s: { id: string }) => s.id === 'experiment-results-daily').queue).toBe('experiment-results');
  }, 180_000);
});

/** The command without --json, in this process: its text on stdout and stderr, and its exit code. */
async function manageText(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const out: string[] = [];
  const err: string[] = [];
  const code = await main(args, { out: (text) => out.push(text), err: (text) => err.push(text) });
  return { code, stdout: out.join('\n'), stderr: err.join('\n') };
}

describe('npm run manage: deletions and property indexes as an operator reads them', () => {
  it('deletion show in text prints each field of the request and receipt, never [object Object]', async () => {
    const { web } = await setUp();
    const [id] = await recordDeletionRequests(api.orm.em.fork() as any, [
      {
        projectId: web.id,
        type: 'person_events',
        mode: 'weekly',
        key: randomUUID(),
        distinctIds: ['d'],
        createdById: null,
      },
    ]);
    const shown = await manageText('deletion', 'show', '--id', id);
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stdout).not.toContain('[object Object]');
    expect(shown.stdout).toMatch(new RegExp(`^ +id: ${id}$`, 'm'));
    expect(shown.stdout).toMatch(/^ +status: pending$/m);
    expect(shown.stdout).toMatch(/^receipt: *$/m);
  }, 60_000);

  it('the help says how --json output is piped (npm run -s keeps the banner off stdout)', async () => {
    const help = await manageText('help');
    expect(help.stdout).toContain('npm run -s manage --');
  });

  it('<object> --help prints the help of its commands; the object alone is a usage error', async () => {
    const help = await manageText('deletion', '--help');
    expect(help.code, help.stderr).toBe(0);
    expect(help.stderr).toBe('');
    for (const command of ['deletion list', 'deletion show', 'deletion retry', 'deletion cancel'])
      expect(help.stdout).toContain(`  ${command} `);
    expect(help.stdout).not.toContain('key create');
    expect((await manageText('help', 'deletion')).stdout).toBe(help.stdout);
    const bare = await manageText('deletion');
    expect(bare.code).toBe(2);
    expect(bare.stderr).toContain('  deletion list ');
    expect((await manageText('nothing', '--help')).code).toBe(2);
  });

  it('property unindex of a key without indexes exits 1 with a message', async () => {
    const key = `never-indexed-${randomUUID().slice(0, 8)}`;
    const result = await manageText('property', 'unindex', '--key', key);
    expect(result.code).toBe(1);
    expect(result.stderr).toBe(`Error: No index on person property ${key} (see \`property indexes\`)`);
  });

  it('deletion statuses: the same words and meaning as the API and the operators’ page', async () => {
    const help = await manageText('deletion', 'list', '--help');
    const words = help.stdout.match(/--status ([a-z|]+)/)?.[1].split('|');
    // The API's status enum, then the page's two views: not done (open) and every status (all).
    expect(words).toEqual(['pending', 'running', 'completed', 'failed', 'cancelled', 'open', 'all']);
    expect([...OPERATOR_DELETION_FILTERS]).toEqual(words);
    // A running request is running, not pending, as on the page.
    const { web } = await setUp();
    const [id] = await recordDeletionRequests(api.orm.em.fork() as any, [
      {
        projectId: web.id,
        type: 'person_events',
        mode: 'weekly',
        key: randomUUID(),
        distinctIds: ['d'],
        createdById: null,
      },
    ]);
    await api.orm.em.fork().getConnection().execute(`update async_deletion set status = 'running' where id = ?`, [id]);
    const ids = async (status: string) =>
      (await ok('deletion', 'list', '--project', String(web.id), '--status', status)).map((r: any) => r.id);
    expect(await ids('pending')).toEqual([]);
    expect(await ids('running')).toEqual([id]);
    expect(await ids('open')).toEqual([id]);
    expect(await ids('all')).toEqual([id]);
  }, 60_000);
});
