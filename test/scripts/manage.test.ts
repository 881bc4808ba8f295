// The management command (`npm run manage -- …`) run as a real process against the test database;
// the keys it makes are then used on the running API.
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, startApi, type TestApi } from '../helpers.ts';

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

function manage(...args: string[]): Promise<Run> {
  return new Promise((resolve) => {
    execFile(process.execPath, ['scripts/manage.ts', ...args, '--json'], { cwd: root, env: { ...process.env, LOG_LEVEL: 'silent' } }, (error, stdout, stderr) => {
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

describe('npm run manage', () => {
  it('creates a key with exactly its scopes and project; lists it masked; roll and revoke take effect at once', async () => {
    const { org, web, app, email } = await setUp();
    expect(web).toMatchObject({ name: 'Web', organization: org.id, api_token: expect.stringMatching(/^phc_/) });
    const key = await ok('key', 'create', '--user', email, '--label', 'reader', '--scopes', 'person:read', '--projects', String(web.id));
    expect(key.value).toMatch(/^phx_/);

    expect((await get(`/api/projects/${web.id}/persons/`, key.value)).status).toBe(200);
    const wrongProject = await get(`/api/projects/${app.id}/persons/`, key.value);
    expect(wrongProject.status).toBe(403);
    expect(wrongProject.body.detail).toBe(`API key does not have access to the requested project: ID ${app.id}.`);
    const missingScope = await get(`/api/projects/${web.id}/experiments/`, key.value);
    expect(missingScope.status).toBe(403);
    expect(missingScope.body.detail).toBe("API key missing required scope 'experiment:read'");
    expect((await call(api.baseUrl, 'POST', `/api/projects/${web.id}/persons/bulk_delete/`, { key: key.value, body: { ids: [] } })).body.detail).toBe(
      "API key missing required scope 'person:write'",
    );
    const current = (await get('/api/personal_api_keys/@current', key.value)).body;
    expect(current).toMatchObject({ id: key.id, label: 'reader', scopes: ['person:read'], scoped_teams: [web.id], scoped_organizations: [], value: null });

    const listed = await manage('key', 'list', '--user', email);
    expect(listed.json).toEqual([expect.objectContaining({ id: key.id, label: 'reader', mask_value: `phx_...${key.value.slice(-4)}`, scopes: 'person:read', projects: String(web.id) })]);
    expect(listed.stdout).not.toContain(key.value);
    const table = await new Promise<string>((resolve) =>
      execFile(process.execPath, ['scripts/manage.ts', 'key', 'list', '--user', email], { cwd: root }, (_e, stdout) => resolve(stdout)),
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
    expect((await manage('key', 'create', '--user', email, '--label', 'x', '--scopes', '*', '--orgs', elsewhere.id)).stderr).toContain(
      'You must be a member of all organizations/teams that you are scoping the key to.',
    );
    await ok('org', 'add-member', '--org', elsewhere.id, '--user', email);
    const scoped = await ok('key', 'create', '--user', email, '--label', 'org', '--scopes', '*', '--orgs', org.id);
    const all = await ok('key', 'create', '--user', email, '--label', 'all', '--scopes', '*');
    const listIds = async (path: string, key: string) => (await get(path, key)).body.results.map((r: any) => r.id).sort();
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
      fetch(`${api.baseUrl}/capture/`, { method: 'POST', body: JSON.stringify({ api_key: token, event: 'e', distinct_id: 'd' }) }).then((r) => r.status);
    expect(await send(web.api_token)).toBe(200);
    const rotated = await ok('project', 'rotate-token', '--project', String(web.id));
    expect(rotated.api_token).toMatch(/^phc_/);
    expect(await send(web.api_token)).toBe(401);
    expect(await send(rotated.api_token)).toBe(200);
  });

  it('refuses bad input with the reason and a non-zero exit, and creates nothing', async () => {
    const { org, web, email } = await setUp();
    const cases: [string[], number, string][] = [
      [['key', 'create', '--user', email, '--label', 'x', '--scopes', 'person:read,persons:write'], 1, 'Invalid scope: persons:write'],
      [['key', 'create', '--user', email, '--label', '   ', '--scopes', '*'], 1, 'label: This field may not be blank.'],
      [['key', 'create', '--user', email, '--label', 'x'.repeat(41), '--scopes', '*'], 1, 'no more than 40 characters'],
      [['key', 'create', '--user', email, '--label', 'x', '--scopes', ','], 1, 'scopes: This field is required.'],
      [['key', 'create', '--user', email, '--label', 'x', '--scopes', '*', '--projects', 'abc'], 1, 'Invalid project id: abc'],
      [['key', 'create', '--user', email, '--label', 'x', '--scopes', '*', '--projects', '999999999'], 1, 'You must be a member'],
      [['key', 'create', '--user', 'nobody@example.com', '--label', 'x', '--scopes', '*'], 1, 'No user with the email nobody@example.com'],
      [['key', 'create', '--user', email, '--label', 'x'], 2, '--scopes is required'],
      [['key', 'create', '--user', email, '--label', 'x', '--scopes', '*', '--color', 'red'], 2, "Unknown option '--color'"],
      [['key', 'roll', '--key', 'nope'], 1, 'No personal API key with id nope'],
      [['user', 'create', '--email', 'not-an-email', '--org', org.id], 1, 'Enter a valid email address'],
      [['user', 'create', '--email', email, '--org', org.id], 1, 'There is already a user with the email'],
      [['user', 'create', '--email', 'x@example.com', '--org', org.id, '--level', 'boss'], 1, 'Invalid membership level: boss'],
      [['project', 'create', '--org', 'not-a-uuid', '--name', 'P'], 1, 'No organization with id not-a-uuid'],
      [['project', 'create', '--org', org.id, '--name', 'P', '--timezone', 'Mars/Olympus'], 1, '"Mars/Olympus" is not a valid choice.'],
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
  }, 60_000);

  it('stops at ten keys per user, with PostHog\'s message', async () => {
    const { email } = await setUp();
    for (let i = 0; i < 10; i++) await ok('key', 'create', '--user', email, '--label', `k${i}`, '--scopes', 'person:read');
    const eleventh = await manage('key', 'create', '--user', email, '--label', 'k10', '--scopes', 'person:read');
    expect(eleventh.code).toBe(1);
    expect(eleventh.stderr).toContain('You can only have 10 personal API keys. Remove an existing key before creating a new one.');
  }, 60_000);
});
