// Capture's project lookup by API token, with the API process's cache on (api/capture/project-cache.ts):
// /batch finds the project in memory, and a token rotated or a project deleted — by any process, here
// plain SQL — shows on the next request once the API process has heard the notification (which the
// tests wait for). A change made with triggers off (session_replication_role = replica) notifies no one:
// it shows whether an answer came from the cache.
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, createAccount, startApi, type TestAccount, type TestApi } from '../../helpers.ts';

let api: TestApi;
let db: pg.Client;

beforeAll(async () => {
  api = await startApi(undefined, { projectCache: true });
  db = new pg.Client({ connectionString: api.config.databaseUrl });
  await db.connect();
});
afterAll(async () => {
  await db.end();
  await api.close();
});

const capture = (token: string) =>
  call(api.baseUrl, 'POST', '/batch/', {
    body: { api_key: token, batch: [{ event: 'e', distinct_id: 'd', uuid: randomUUID(), properties: {} }] },
  });

/** Runs `statement` and waits (up to 2 s) until the API process has heard of a change to `account`'s project. */
async function heard(account: TestAccount, statement: string, params: unknown[]): Promise<void> {
  const cache = api.deps.projectCache!;
  let listener!: (projects: Set<number> | 'all') => void;
  const got = new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no notification for project ${account.projectId}`)), 2000);
    listener = (projects) => {
      if (projects === 'all' || projects.has(account.projectId)) {
        clearTimeout(timer);
        resolve();
      }
    };
    cache.on('invalidated', listener);
  });
  try {
    await db.query(statement, params);
    await got;
  } finally {
    cache.off('invalidated', listener);
  }
}

describe('capture project cache', () => {
  it('answers from memory: a token changed with no notification still finds its project', async () => {
    const account = await createAccount(api.orm);
    expect((await capture(account.projectToken)).status).toBe(200);
    await db.query(`begin; set local session_replication_role = replica`);
    await db.query('update project set api_token = $2 where id = $1', [account.projectId, `phc_${randomUUID()}`]);
    await db.query('commit');
    expect((await capture(account.projectToken)).status).toBe(200);
  });

  it('a rotated token is refused and the new one accepted once the API process has heard of it', async () => {
    const account = await createAccount(api.orm);
    expect((await capture(account.projectToken)).status).toBe(200);
    const rotated = `phc_${randomUUID()}`;
    await heard(account, 'update project set api_token = $2 where id = $1', [account.projectId, rotated]);
    const refused = await capture(account.projectToken);
    expect(refused.status).toBe(401);
    expect(refused.body.code).toBe('invalid_api_key');
    expect((await capture(rotated)).status).toBe(200);
  });

  it("a deleted project's token is refused once the API process has heard of it", async () => {
    const account = await createAccount(api.orm);
    const other = await createAccount(api.orm);
    expect((await capture(account.projectToken)).status).toBe(200);
    expect((await capture(other.projectToken)).status).toBe(200);
    await heard(account, 'delete from project where id = $1', [account.projectId]);
    expect((await capture(account.projectToken)).status).toBe(401);
    expect((await capture(other.projectToken)).status).toBe(200);
  });
});

describe('capture EntityManagers', () => {
  it('forks one EntityManager per request (its transaction), with the project cached', async () => {
    const account = await createAccount(api.orm);
    expect((await capture(account.projectToken)).status).toBe(200);
    // Every EntityManager's fork, the request's own included (they share the process EntityManager's class).
    const prototype = Object.getPrototypeOf(api.orm.em) as typeof api.orm.em;
    const fork = prototype.fork;
    const own = Object.hasOwn(prototype, 'fork');
    let forks = 0;
    prototype.fork = function (this: typeof api.orm.em, ...args) {
      forks++;
      return fork.apply(this, args);
    };
    try {
      expect((await capture(account.projectToken)).status).toBe(200);
    } finally {
      if (own) prototype.fork = fork;
      else Reflect.deleteProperty(prototype, 'fork');
    }
    expect(forks).toBe(1);
  });
});
