// The API process's authentication cache (api/http/auth-cache.ts): it serves repeats without
// PostgreSQL, and every change to keys, users, memberships or projects, made by any connection,
// takes effect on the next requests. A change made with triggers switched off
// (session_replication_role = replica) sends no notification: it shows whether a result came
// from the cache.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AuthCache } from '../../../api/http/auth-cache.ts';
import { call, createAccount, createKey, eventually, startApi, type TestAccount, type TestApi } from '../../helpers.ts';
import { sql } from '../../db.ts';

let api: TestApi;
let db: pg.Client;

beforeAll(async () => {
  api = await startApi((config) => {
    config.authCacheSeconds = 60;
  });
  db = new pg.Client({ connectionString: api.config.databaseUrl });
  await db.connect();
});
afterAll(async () => {
  await db.end();
  await api.close();
});

/** Runs `statement` without firing triggers, so no API process hears of it. */
const silently = (statement: string) =>
  db.query(`begin; set local session_replication_role = replica; ${statement}; commit`);

const status = async (account: TestAccount, key = account.apiKey) =>
  (await call(api.baseUrl, 'GET', `/api/projects/${account.projectId}/persons/`, { key })).status;

async function cachedAccount() {
  const account = await createAccount(api.orm);
  // Creating the account notified the API; a late notification would drop the entry cached below.
  // Notifications arrive in commit order, so once a marker change made after it is heard, all are.
  const cache = api.deps.authCache!;
  const heard = cache.snapshot();
  await sql(api.orm, `update project set name = name where id = ?`, [account.projectId]);
  await eventually(async () => cache.snapshot() > heard, 5000, 10);
  expect(await status(account)).toBe(200);
  return account;
}

describe('authentication cache', () => {
  it('serves a repeated request without reading the key again', async () => {
    const account = await cachedAccount();
    await silently(`update personal_api_key set scopes = '{insight:read}' where user_id = ${account.userId}`);
    expect(await status(account)).toBe(200);
    // Any notified change drops the cache, and the scopes now in PostgreSQL apply.
    await sql(api.orm, `update project set name = name where id = ?`, [account.projectId]);
    await eventually(async () => (await status(account)) === 403, 2000, 20);
  });

  it.each([
    ['the key is deleted', (a: TestAccount) => `delete from personal_api_key where user_id = ${a.userId}`, 401],
    [
      'the key is rolled',
      (a: TestAccount) => `update personal_api_key set secure_value = 'rolled-' || id where user_id = ${a.userId}`,
      401,
    ],
    [
      'its scopes change',
      (a: TestAccount) => `update personal_api_key set scopes = '{insight:read}' where user_id = ${a.userId}`,
      403,
    ],
    [
      'it is scoped to another project',
      (a: TestAccount) => `update personal_api_key set scoped_teams = '{0}' where user_id = ${a.userId}`,
      403,
    ],
    [
      'the user is deactivated',
      (a: TestAccount) => `update app_user set is_active = false where id = ${a.userId}`,
      401,
    ],
    [
      'the user leaves the organization',
      (a: TestAccount) => `delete from organization_membership where user_id = ${a.userId}`,
      403,
    ],
    ['the project is deleted', (a: TestAccount) => `delete from project where id = ${a.projectId}`, 404],
    [
      'the organization is deleted',
      (a: TestAccount) => `delete from organization where id = '${a.organizationId}'`,
      404,
    ],
  ])('answers from PostgreSQL again once %s, whoever changed it', async (_, change, expected) => {
    const account = await cachedAccount();
    await db.query(change(account));
    await eventually(async () => (await status(account)) === expected, 2000, 20);
  });

  it('sees a membership granted after a refusal was cached', async () => {
    const member = await cachedAccount();
    const outsider = await createAccount(api.orm);
    const outsiderAsks = () =>
      call(api.baseUrl, 'GET', `/api/projects/${member.projectId}/persons/`, { key: outsider.apiKey });
    expect((await outsiderAsks()).status).toBe(403);
    await db.query(`insert into organization_membership (organization_id, user_id, level) values ($1, $2, 1)`, [
      member.organizationId,
      outsider.userId,
    ]);
    await eventually(async () => (await outsiderAsks()).status === 200, 2000, 20);
  });

  it('turns itself off while its listening connection is down, and back on when it returns', async () => {
    const cache = api.deps.authCache!;
    expect(cache.active).toBe(true);
    const account = await cachedAccount();
    await db.query(
      `select pg_terminate_backend(pid) from pg_stat_activity where query = 'listen auth_changed' and pid <> pg_backend_pid()`,
    );
    await eventually(async () => !cache.active, 2000, 10);
    // Off: a change no one announced is seen at once.
    await silently(`update personal_api_key set scopes = '{insight:read}' where user_id = ${account.userId}`);
    expect(await status(account)).toBe(403);
    await eventually(async () => cache.active, 10_000, 50);
    const again = await cachedAccount();
    await silently(`update personal_api_key set scopes = '{insight:read}' where user_id = ${again.userId}`);
    expect(await status(again)).toBe(200);
  });

  it('the retention preview answers the retention days it counts with, not the cached project’s', async () => {
    const account = await cachedAccount();
    const preview = async () =>
      (
        await call(api.baseUrl, 'GET', `/api/projects/${account.projectId}/retention/preview/`, {
          key: account.apiKey,
        })
      ).body;
    expect(await preview()).toMatchObject({ event_retention_days: null, event_cutoff: null });
    // As right after a PATCH whose notification has not reached this process yet.
    await silently(`update project set event_retention_days = 30 where id = ${account.projectId}`);
    const res = await preview();
    expect(res.event_cutoff).not.toBeNull();
    expect(res).toMatchObject({ event_retention_days: 30, recording_retention_days: null });
  });

  it('does not keep a result read before an invalidation', () => {
    const cache = new AuthCache('postgres://unused', 60_000);
    (cache as unknown as { listener: { up: boolean } }).listener.up = true; // as if listening
    const before = cache.snapshot();
    cache.store('a', { key_id: 'a' }, before);
    expect(cache.read('a')).toEqual({ key_id: 'a' });
    cache.invalidate();
    cache.store('b', { key_id: 'b' }, before);
    expect(cache.read('a')).toBeUndefined();
    expect(cache.read('b')).toBeUndefined();
  });
});

describe('without the cache', () => {
  it('AUTH_CACHE_SECONDS=0 reads PostgreSQL on every request', async () => {
    const uncached = await startApi((config) => {
      config.authCacheSeconds = 0;
    });
    try {
      expect(uncached.deps.authCache).toBeNull();
      const account = await createAccount(uncached.orm);
      const key = await createKey(uncached.orm, account.userId);
      const ask = () => call(uncached.baseUrl, 'GET', `/api/projects/${account.projectId}/persons/`, { key });
      expect((await ask()).status).toBe(200);
      await silently(
        `update personal_api_key set scopes = '{insight:read}' where secure_value <> '' and user_id = ${account.userId}`,
      );
      expect((await ask()).status).toBe(403);
    } finally {
      await uncached.close();
    }
  });
});
