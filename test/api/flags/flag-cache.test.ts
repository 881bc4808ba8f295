// The API process's flag definition cache (api/flags/cache.ts), with the cache on: /flags answers
// from memory (no query at all for flags without person-property conditions), every kind of change
// that can alter an answer — by the experiments API or by plain SQL — shows on the very next request
// once the API process has heard its notification (which the tests wait for: delivery takes from well
// under a millisecond to a few ms on a loaded machine), and while the listening connection is down
// every request reads PostgreSQL. A change made with triggers off (session_replication_role =
// replica) notifies no one: it shows whether an answer came from the cache.
import pg from 'pg';
import type { MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { FlagCache } from '../../../api/flags/cache.ts';
import { call, createAccount, eventually, startApi, type TestAccount, type TestApi } from '../../helpers.ts';

let api: TestApi;
let db: pg.Client;

beforeAll(async () => {
  api = await startApi(undefined, { flagCache: true });
  db = new pg.Client({ connectionString: api.config.databaseUrl });
  await db.connect();
});
afterAll(async () => {
  await db.end();
  await api.close();
});

/** Runs `statement` without firing triggers, so no API process hears of it. */
const silently = (statement: string, params: unknown[] = []) =>
  db.query(`begin; set local session_replication_role = replica`).then(async () => {
    await db.query(statement, params);
    await db.query('commit');
  });

const askFlags = (token: string, body: Record<string, unknown> = { distinct_id: 'x' }) =>
  call(api.baseUrl, 'POST', '/flags/?v=2', { body: { token, ...body } });
type FlagAnswer = { enabled: boolean; variant: string | null; reason: { code: string } };
async function flagsFor(account: TestAccount, distinctId = 'someone', extra: Record<string, unknown> = {}) {
  const res = await askFlags(account.projectToken, { distinct_id: distinctId, ...extra });
  expect(res.status).toBe(200);
  return res.body.flags as Record<string, FlagAnswer>;
}
const variantsOf = async (account: TestAccount, key: string) =>
  Promise.all(['a', 'b', 'c', 'd', 'e', 'f'].map(async (id) => (await flagsFor(account, id))[key]?.variant));

const rest = (account: TestAccount, method: string, path: string, body?: unknown) =>
  call(api.baseUrl, method, `/api/projects/${account.projectId}${path}`, { key: account.apiKey, body });

/**
 * Runs a change and waits (up to 2 s) until the API process has heard of it: a notification naming
 * the project. Notifications arrive in commit order, so once heard, every earlier change was too.
 */
async function heard<T>(account: TestAccount, run: () => Promise<T>): Promise<T> {
  const cache = api.deps.flagCache!;
  let onInvalidated!: (projects: Set<number> | 'all') => void;
  let timer: NodeJS.Timeout | undefined;
  const got = new Promise<void>((resolve, reject) => {
    const late = () => reject(new Error(`no notification for project ${account.projectId} within 2 s`));
    timer = setTimeout(late, 2000);
    onInvalidated = (projects) => (projects === 'all' || projects.has(account.projectId)) && resolve();
    cache.on('invalidated', onInvalidated);
  });
  got.catch(() => undefined); // awaited below; `run` may throw first
  try {
    const result = await run();
    await got;
    return result;
  } finally {
    clearTimeout(timer);
    cache.off('invalidated', onInvalidated);
  }
}

/** A plain active flag, rolled out to everyone, made with SQL (there is no flag CRUD endpoint). */
async function sqlFlag(account: TestAccount, key: string, filters: object, columns: Record<string, unknown> = {}) {
  const names = Object.keys(columns);
  const { rows } = await heard(account, () =>
    db.query(
      `insert into feature_flag (project_id, key, filters${names.map((n) => `, ${n}`).join('')})
       values ($1, $2, $3::jsonb${names.map((_, i) => `, $${i + 4}`).join('')}) returning id`,
      [account.projectId, key, JSON.stringify(filters), ...Object.values(columns)],
    ),
  );
  return rows[0].id as number;
}
const everyone = { groups: [{ properties: [], rollout_percentage: 100 }] };
const split = (control: number) => [
  { key: 'control', rollout_percentage: control },
  { key: 'test', rollout_percentage: 100 - control },
];
const fiftyFifty = { ...everyone, multivariate: { variants: split(50) } };
/** Everyone whose stored (or sent) `email` contains `value`. */
const emailRule = (value: string) => ({
  groups: [{ properties: [{ key: 'email', operator: 'icontains', value, type: 'person' }], rollout_percentage: 100 }],
});
const flagSql = (set: string) => `update feature_flag set ${set} where project_id = $1`;
const rollout = (percentage: number) =>
  flagSql(`filters = jsonb_set(filters, '{groups,0,rollout_percentage}', '${percentage}')`);
const ZERO = { statements: 0, checkouts: 0 };

/** Proof that answers come from memory now: a change no one hears of is not seen. */
async function expectCached(account: TestAccount, key: string) {
  expect((await flagsFor(account))[key].enabled).toBe(true);
  await silently(`${flagSql('active = false')} and key = $2`, [account.projectId, key]);
  expect((await flagsFor(account))[key]?.enabled).toBe(true);
  await silently(`${flagSql('active = true')} and key = $2`, [account.projectId, key]);
}

/**
 * Counts what the API process sends to PostgreSQL through its ORM's pool: every statement a pooled
 * connection runs (MikroORM's own and rows()' straight ones alike) and every checkout. The listener
 * connection of the caches is apart and sends nothing while it listens.
 */
async function queryCounter(orm: MikroORM) {
  const pool = (await orm.em.getConnection().getNativeClient()) as unknown as pg.Pool;
  const counts = { statements: 0, checkouts: 0 };
  let counting = true;
  const counted = new WeakSet<pg.PoolClient>();
  const onAcquire = (client: pg.PoolClient) => {
    counts.checkouts++;
    if (counted.has(client)) return;
    counted.add(client);
    const query = client.query;
    client.query = function (this: pg.PoolClient, ...args: unknown[]) {
      if (counting) counts.statements++;
      return (query as (...a: unknown[]) => unknown).apply(this, args);
    } as typeof client.query;
  };
  pool.on('acquire', onAcquire);
  return {
    /** What `run` made the API send. */
    async during(run: () => Promise<unknown>) {
      const before = { ...counts };
      await run();
      const { statements, checkouts } = counts;
      return { statements: statements - before.statements, checkouts: checkouts - before.checkouts };
    },
    stop() {
      counting = false;
      pool.off('acquire', onAcquire);
    },
  };
}

describe('flag definition cache: every change shows on the very next request', () => {
  const sqlChange = (account: TestAccount, statement: string) =>
    heard(account, () => db.query(statement, [account.projectId]));
  const now = () => new Date().toISOString();

  it('a flag changed by SQL (rollout, deletion, a new flag)', async () => {
    const account = await createAccount(api.orm);
    await sqlFlag(account, 'sql-rollout', everyone);
    await expectCached(account, 'sql-rollout');

    await sqlChange(account, rollout(0));
    expect((await flagsFor(account))['sql-rollout']).toMatchObject({
      enabled: false,
      reason: { code: 'out_of_rollout_bound' },
    });

    await sqlFlag(account, 'sql-new', everyone);
    expect((await flagsFor(account))['sql-new']?.enabled).toBe(true);

    await sqlChange(account, `${flagSql('deleted = true')} and key = 'sql-new'`);
    expect((await flagsFor(account))['sql-new']).toBeUndefined();
  });

  it('a flag’s variant rollout changed through the experiments API', async () => {
    const account = await createAccount(api.orm);
    await sqlFlag(account, 'api-rollout', fiftyFifty);
    const exp = await rest(account, 'POST', '/experiments/', { name: 'Rollout', feature_flag_key: 'api-rollout' });
    expect(exp.status).toBe(201);
    await expectCached(account, 'api-rollout');
    expect(new Set(await variantsOf(account, 'api-rollout'))).toEqual(new Set(['control', 'test']));

    const patched = await heard(account, () =>
      rest(account, 'PATCH', `/experiments/${exp.body.id}/`, {
        parameters: { feature_flag_variants: split(0) },
      }),
    );
    expect(patched.status).toBe(200);
    expect(await variantsOf(account, 'api-rollout')).toEqual(['test', 'test', 'test', 'test', 'test', 'test']);
  });

  it('an experiment launched through the API', async () => {
    const account = await createAccount(api.orm);
    await sqlFlag(account, 'launch-warm', everyone);
    const exp = await heard(account, () =>
      rest(account, 'POST', '/experiments/', { name: 'Launch', feature_flag_key: 'launch-me' }),
    );
    await expectCached(account, 'launch-warm');
    expect((await flagsFor(account))['launch-me']).toBeUndefined(); // a draft's flag is inactive

    const launched = await heard(account, () =>
      rest(account, 'PATCH', `/experiments/${exp.body.id}/`, { start_date: now() }),
    );
    expect(launched.status).toBe(200);
    expect((await flagsFor(account))['launch-me']).toMatchObject({
      enabled: true,
      reason: { code: 'condition_match' },
    });
  });

  it('a holdout changed through the API, and a holdout given to a draft', async () => {
    const account = await createAccount(api.orm);
    const newHoldout = (name: string, percentage: number) =>
      heard(account, () =>
        rest(account, 'POST', '/experiment_holdouts/', { name, filters: [{ rollout_percentage: percentage }] }),
      );
    const holdout = await newHoldout('All out', 100);
    expect(holdout.status).toBe(201);
    const exp = await heard(account, () =>
      rest(account, 'POST', '/experiments/', {
        name: 'Held',
        feature_flag_key: 'held',
        holdout_id: holdout.body.id,
        start_date: now(),
      }),
    );
    expect(exp.status).toBe(201);
    await expectCached(account, 'held');
    expect((await flagsFor(account)).held).toMatchObject({
      variant: `holdout-${holdout.body.id}`,
      reason: { code: 'holdout' },
    });

    const patched = await heard(account, () =>
      rest(account, 'PATCH', `/experiment_holdouts/${holdout.body.id}/`, { filters: [{ rollout_percentage: 0 }] }),
    );
    expect(patched.status).toBe(200);
    expect((await flagsFor(account)).held).toMatchObject({ reason: { code: 'condition_match' } });

    // A draft on an active flag takes a holdout: the flag's filters change with it.
    await sqlFlag(account, 'draft-held', fiftyFifty);
    // (The draft reuses the flag as it is: no change, no notification.)
    const draft = await rest(account, 'POST', '/experiments/', { name: 'Draft', feature_flag_key: 'draft-held' });
    const everyoneOut = await newHoldout('All out 2', 100);
    await expectCached(account, 'draft-held');
    const given = await heard(account, () =>
      rest(account, 'PATCH', `/experiments/${draft.body.id}/`, { holdout_id: everyoneOut.body.id }),
    );
    expect(given.status).toBe(200);
    expect((await flagsFor(account))['draft-held']).toMatchObject({ variant: `holdout-${everyoneOut.body.id}` });
  });

  it('a holdout or a cohort changed by SQL, even where the flag row was not touched', async () => {
    const account = await createAccount(api.orm);
    await sqlFlag(account, 'other-tables', everyone);
    await heard(account, () =>
      rest(account, 'POST', '/experiment_holdouts/', { name: 'H', filters: [{ rollout_percentage: 10 }] }),
    );
    for (const change of [
      `update experiment_holdout set filters = '[{"rollout_percentage": 20}]' where project_id = $1`,
      `insert into cohort (project_id, name, filters) values ($1, 'c', '{}')`,
      `update cohort set filters = '{"properties": {}}' where project_id = $1`,
      `update cohort set deleted = true where project_id = $1`,
      `delete from cohort where project_id = $1`,
    ]) {
      await expectCached(account, 'other-tables');
      await silently(rollout(0), [account.projectId]);
      await sqlChange(account, change);
      expect((await flagsFor(account))['other-tables'].reason.code, change).toBe('out_of_rollout_bound');
      await sqlChange(account, rollout(100));
    }
  });

  it('a change to nothing flags read keeps the cache: a cohort’s count, a project’s other columns', async () => {
    const account = await createAccount(api.orm);
    const marker = await createAccount(api.orm);
    await sqlFlag(account, 'quiet', everyone);
    await sqlChange(account, `insert into cohort (project_id, name, filters) values ($1, 'c', '{}')`);
    await expectCached(account, 'quiet');
    await silently(rollout(0), [account.projectId]);
    for (const statement of [
      `update cohort set count = 5, is_calculating = false, last_calculation = now() where project_id = $1`,
      `update project set ingested_event = true, name = name || '!' where id = $1`,
      flagSql('active = active'), // changes nothing
    ]) {
      await db.query(statement, [account.projectId]);
    }
    // Heard after those (notifications arrive in commit order): any they had sent has arrived too.
    await sqlFlag(marker, 'marker', everyone);
    expect((await flagsFor(account)).quiet.enabled).toBe(true); // still from memory
  });

  it('a project token rolled or a project deleted', async () => {
    const account = await createAccount(api.orm);
    await sqlFlag(account, 'token', everyone);
    await expectCached(account, 'token');
    await sqlChange(account, `update project set api_token = 'phc_rolled_' || id where id = $1`);
    expect((await askFlags(account.projectToken)).status).toBe(401);
    const rolled = { ...account, projectToken: `phc_rolled_${account.projectId}` };
    await expectCached(rolled, 'token');
    await sqlChange(account, `delete from project where id = $1`);
    expect((await askFlags(rolled.projectToken)).status).toBe(401);
  });

  it('other projects keep their entries when one project changes', async () => {
    const [one, two] = [await createAccount(api.orm), await createAccount(api.orm)];
    await sqlFlag(one, 'mine', everyone);
    await sqlFlag(two, 'mine', everyone);
    await expectCached(two, 'mine');
    await silently(rollout(0), [two.projectId]);
    await sqlChange(one, rollout(0));
    expect((await flagsFor(one)).mine.enabled).toBe(false);
    expect((await flagsFor(two)).mine.enabled).toBe(true); // two's entry was kept
  });
});

describe('flag definition cache while its listener is down', () => {
  it('reads PostgreSQL on every request, then serves from memory again once listening', async () => {
    const cache = api.deps.flagCache!;
    const account = await createAccount(api.orm);
    await sqlFlag(account, 'down', everyone);
    await eventually(async () => cache.active, 30_000, 50);
    await expectCached(account, 'down');
    const counter = await queryCounter(api.orm);
    try {
      const { rows } = await db.query(
        `select pg_terminate_backend(pid) from pg_stat_activity
          where query = 'listen flag_definitions_changed' and pid <> pg_backend_pid()`,
      );
      expect(rows.length).toBeGreaterThan(0);
      await eventually(async () => !cache.active, 2000, 10);
      // Off: changes no one announced are seen at once, each time, and each answer read PostgreSQL.
      for (const percentage of [0, 100, 0]) {
        await silently(rollout(percentage), [account.projectId]);
        const sent = await counter.during(async () => {
          expect((await flagsFor(account)).down.enabled).toBe(percentage === 100);
        });
        expect(sent.statements).toBeGreaterThan(0);
      }
      await eventually(async () => cache.active, 30_000, 50);
      await flagsFor(account); // warm-up
      expect(await counter.during(() => flagsFor(account))).toEqual(ZERO);
      await silently(rollout(100), [account.projectId]);
      expect((await flagsFor(account)).down.enabled).toBe(false); // from memory again
    } finally {
      counter.stop();
    }
  });

  it('does not keep definitions read before an invalidation', async () => {
    const cache = new FlagCache('postgres://unused');
    (cache as unknown as { listener: { up: boolean } }).listener.up = true; // as if listening
    let release!: () => void;
    const empty = { projectId: 1, flags: [] };
    const slow = cache.get('phc_x', () => new Promise((resolve) => (release = () => resolve(empty))));
    cache.invalidate(); // a change lands while the read is in flight
    release();
    await slow;
    let loads = 0;
    await cache.get('phc_x', async () => {
      loads++;
      return empty;
    });
    expect(loads).toBe(1);
  });
});

describe('queries per /flags request after warm-up', () => {
  it('none for flags without person-property conditions; the person only when a flag needs it', async () => {
    const account = await createAccount(api.orm);
    await sqlFlag(account, 'plain', everyone);
    await sqlFlag(account, 'multi', fiftyFifty);
    await sqlFlag(account, 'held', { ...fiftyFifty, holdout: { id: 1, exclusion_percentage: 10 } });
    await sqlFlag(account, 'by-event-property', {
      groups: [{ properties: [{ key: '$browser', type: 'event', value: 'x' }], rollout_percentage: 100 }],
    });
    // Served from memory only while the cache listens for changes (an earlier test restarted its listener).
    await eventually(async () => api.deps.flagCache!.active, 30_000, 50);
    const counter = await queryCounter(api.orm);
    try {
      await flagsFor(account); // warm-up
      const quiet = await counter.during(async () => {
        for (let i = 0; i < 20; i++) expect(Object.keys(await flagsFor(account, `user-${i}`)).length).toBe(4);
        await call(api.baseUrl, 'POST', '/decide/?v=3', { body: { token: account.projectToken, distinct_id: 'd' } });
        await fetch(`${api.baseUrl}/flags/?v=2&token=${account.projectToken}&distinct_id=q`);
      });
      expect(quiet).toEqual(ZERO);

      // A flag on a person property: the person is read, once per request…
      await sqlFlag(account, 'by-email', emailRule('@corp.com'));
      await flagsFor(account); // warm-up
      const withPerson = await counter.during(() => flagsFor(account, 'user-1'));
      expect(withPerson.statements).toBe(1);
      // …unless the SDK sent that property (it overrides the stored one), or asks only for other flags.
      const sent = { person_properties: { email: 'a@corp.com' } };
      expect(await counter.during(() => flagsFor(account, 'user-1', sent))).toEqual(ZERO);
      const others = { flag_keys_to_evaluate: ['plain', 'multi'] };
      expect(await counter.during(() => flagsFor(account, 'user-1', others))).toEqual(ZERO);
    } finally {
      counter.stop();
    }
  });

  it('forks no EntityManager for a request answered from memory, one when the person is read', async () => {
    const account = await createAccount(api.orm);
    await sqlFlag(account, 'plain', everyone);
    await eventually(async () => api.deps.flagCache!.active, 30_000, 50);
    await flagsFor(account); // warm-up: the definitions are read (with an EntityManager) and kept
    const fork = vi.spyOn(api.orm.em, 'fork');
    try {
      expect((await flagsFor(account, 'user-1')).plain.enabled).toBe(true);
      expect(fork).not.toHaveBeenCalled();
      await sqlFlag(account, 'by-email', emailRule('@corp.com'));
      await eventually(async () => Object.keys(await flagsFor(account)).length === 2, 5000, 20);
      fork.mockClear();
      expect((await flagsFor(account, 'user-1')).plain.enabled).toBe(true);
      expect(fork).toHaveBeenCalledTimes(1);
    } finally {
      fork.mockRestore();
    }
  });

  it('the person read still decides: stored properties match, and continuity keeps its hash key', async () => {
    const account = await createAccount(api.orm);
    await sqlFlag(account, 'by-email', emailRule('@corp.com'));
    await sqlFlag(account, 'sticky', fiftyFifty, { ensure_experience_continuity: true });
    const { rows } = await db.query(
      `insert into person (uuid, project_id, properties)
       values (gen_random_uuid(), $1, '{"email": "x@corp.com"}') returning id`,
      [account.projectId],
    );
    await db.query(`insert into person_distinct_id (project_id, person_id, distinct_id) values ($1, $2, 'known')`, [
      account.projectId,
      rows[0].id,
    ]);
    expect((await flagsFor(account, 'known'))['by-email'].enabled).toBe(true);
    expect((await flagsFor(account, 'stranger'))['by-email'].enabled).toBe(false);
    // Experience continuity: bucketed by the anonymous id first seen, whatever the distinct id.
    const anon = (await flagsFor(account, 'anon-1')).sticky.variant;
    expect((await flagsFor(account, 'known', { $anon_distinct_id: 'anon-1' })).sticky.variant).toBe(anon);
    const counter = await queryCounter(api.orm);
    try {
      const allSent = { person_properties: { email: 'y@corp.com' } };
      const sent = await counter.during(() => flagsFor(account, 'known', allSent));
      expect(sent.statements).toBeGreaterThan(0); // the continuity flag needs the person's hash key
    } finally {
      counter.stop();
    }
  });
});
