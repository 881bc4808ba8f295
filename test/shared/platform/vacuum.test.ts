// Table health after mass deletes, whatever the server's autovacuum setting: with autovacuum off on
// the tables involved, persons deleted through the API and their events deleted by the worker's job
// leave no dead rows once the maintenance jobs have run (dead rows made planning a person lookup take
// 440–715 ms: /flags fell to 28 req/s).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Config } from '../../../shared/platform/config.ts';
import { sql } from '../../db.ts';
import {
  call,
  createAccount,
  eventually,
  ownDatabase,
  settledJob,
  startApi,
  startTestWorker,
  uniqueRedisPrefix,
  type TestAccount,
  type TestApi,
} from '../../helpers.ts';

const PERSONS = 1000;
const THRESHOLD = 500;
const prefix = uniqueRedisPrefix();
let api: TestApi;
let worker: Awaited<ReturnType<typeof startTestWorker>>;
let account: TestAccount;
let partitions: string[] = [];

const stats = async (table: string) =>
  (
    await sql<{ dead: number; vacuumed: number }>(
      api.orm,
      `select n_dead_tup::int as dead, coalesce(extract(epoch from last_vacuum) * 1000, 0)::float8 as vacuumed
         from pg_stat_user_tables where relname = ? and schemaname = current_schema()`,
      [table],
    )
  )[0];
const maintenanceJobs = async (name: string) =>
  (await worker.deps.queues.maintenance.getJobs(['completed', 'failed', 'waiting', 'delayed', 'active'])).filter(
    (j) => j?.name === name,
  );
const releaseWeekly = async (requestIds: string[]) => {
  await worker.deps.queues.deletions.add('release-batch', { mode: 'weekly' });
  await eventually(
    async () =>
      (
        await sql(
          api.orm,
          `select count(*)::int as n from async_deletion where id = any(?::bigint[]) and status = 'completed'`,
          [`{${requestIds.join(',')}}`],
        )
      )[0].n === requestIds.length,
    60_000,
  );
};

/** Persons with two distinct ids each and three events each: this month and the month before. */
async function seedPersons(count: number, tag: string): Promise<string[]> {
  const ids = await sql<{ id: string }>(
    api.orm,
    `insert into person (uuid, project_id, properties) select gen_random_uuid(), ?, '{}' from generate_series(1, ?)
     returning id::text as id`,
    [account.projectId, count],
  );
  await sql(
    api.orm,
    `insert into person_distinct_id (project_id, person_id, distinct_id)
     select p.project_id, p.id, ? || p.id || '-' || k from person p cross join generate_series(1, 2) k
      where p.id = any(?::bigint[])`,
    [tag, `{${ids.map((r) => r.id).join(',')}}`],
  );
  await sql(
    api.orm,
    `insert into event (uuid, project_id, event, distinct_id, person_id, properties, timestamp, created_at)
     select gen_random_uuid(), p.project_id, 'e', ? || p.id || '-1', p.uuid, '{}', now() - make_interval(days => d),
            now() - interval '1 minute'
       from person p cross join unnest(array[0, 1, 35]) d where p.id = any(?::bigint[])`,
    [tag, `{${ids.map((r) => r.id).join(',')}}`],
  );
  return ids.map((r) => r.id);
}

async function bulkDelete(ids: string[]): Promise<string[]> {
  const [{ last }] = await sql(api.orm, `select coalesce(max(id), 0)::text as last from async_deletion`);
  const res = await call(api.baseUrl, 'POST', `/api/projects/${account.projectId}/persons/bulk_delete/`, {
    key: account.apiKey,
    body: { ids, delete_events: true },
  });
  expect(res.status, res.text).toBe(200);
  const requests = await sql<{ id: string }>(
    api.orm,
    `select id::text as id from async_deletion where project_id = ? and id > ? and deletion_type = 'person_events'`,
    [account.projectId, last],
  );
  expect(requests.length).toBe(ids.length);
  return requests.map((r) => r.id);
}

beforeAll(async () => {
  // Its own database: other test files' open transactions would keep VACUUM from removing dead rows.
  const url = await ownDatabase('vacuum');
  const onOwnDatabase = (config: Config) => {
    config.databaseUrl = url;
    config.databaseDirectUrl = url;
  };
  api = await startApi((config) => {
    onOwnDatabase(config);
    config.redisPrefix = prefix;
  });
  worker = await startTestWorker(prefix, (config) => {
    onOwnDatabase(config);
    config.maintenance.vacuumDeadRows = THRESHOLD;
  });
  account = await createAccount(api.orm);
  partitions = (
    await sql<{ name: string }>(
      api.orm,
      `select c.relname as name from pg_inherits i join pg_class c on c.oid = i.inhrelid
        where i.inhparent = 'event'::regclass`,
    )
  ).map((r) => r.name);
  // The server's autovacuum may be on or off; these tables get none during the test either way.
  for (const table of ['person', 'person_distinct_id', ...partitions])
    await sql(api.orm, `alter table "${table}" set (autovacuum_enabled = false)`);
});
afterAll(async () => {
  for (const table of ['person', 'person_distinct_id', ...partitions])
    await sql(api.orm, `alter table "${table}" reset (autovacuum_enabled)`);
  await worker?.close();
  await api?.close();
});

describe('vacuum after mass deletes', () => {
  it('vacuums persons deleted by the API (statistics job) and events deleted by the worker (vacuum jobs)', async () => {
    const ids = await seedPersons(PERSONS, 'mass-');
    const touched = (
      await sql<{ name: string }>(
        api.orm,
        `select distinct tableoid::regclass::text as name from event where project_id = ?`,
        [account.projectId],
      )
    ).map((r) => r.name);
    expect(touched.length).toBeGreaterThanOrEqual(2); // this month's partition and the previous month's table
    for (const table of ['person', 'person_distinct_id', ...touched]) await sql(api.orm, `vacuum "${table}"`);
    const before = new Map<string, number>();
    for (const table of ['person', 'person_distinct_id', ...touched]) before.set(table, (await stats(table)).vacuumed);

    const requests = await bulkDelete(ids);
    // The API's deletes reach pg_stat_user_tables within seconds (statistics are sent when its connection idles).
    await eventually(
      async () => (await stats('person')).dead >= PERSONS && (await stats('person_distinct_id')).dead >= 2 * PERSONS,
    );

    // The periodic statistics job (as its scheduler runs it) vacuums the tables over the threshold.
    const job = await settledJob(
      worker.deps.queues.maintenance,
      await worker.deps.queues.maintenance.add('refresh-statistics', {}),
    );
    expect(job.returnvalue.vacuumed).toEqual(expect.arrayContaining(['person', 'person_distinct_id']));
    for (const table of ['person', 'person_distinct_id']) {
      const s = await stats(table);
      expect(s.vacuumed, table).toBeGreaterThan(before.get(table)!);
      expect(s.dead, table).toBeLessThan(PERSONS / 20);
    }

    // The weekly batch deletes their 3000 events; the deletion job queues a vacuum of each table it deleted from.
    await releaseWeekly(requests);
    const vacuums = await eventually(async () => {
      const done = (await maintenanceJobs('vacuum-table')).filter((j) => j.finishedOn);
      const tables = done.map((j) => j.data.table);
      return touched.every((t) => tables.includes(t)) ? done : null;
    }, 60_000);
    for (const v of vacuums) expect(v.failedReason, v.data.table).toBeUndefined();
    for (const table of touched) expect((await stats(table)).vacuumed, table).toBeGreaterThan(before.get(table)!);
    // Their dead rows are gone, if not by that vacuum then by the statistics job's next run. On a busy
    // machine (load 15) a partition still showed the 1,000 dead rows after its vacuum: the deleting
    // backend's statistics arrived after it, or a transaction open at the time kept the rows. Either
    // way the periodic statistics job is what catches it, as it runs in production.
    await eventually(
      async () => {
        const remaining = [];
        for (const table of touched) if ((await stats(table)).dead >= PERSONS / 20) remaining.push(table);
        if (remaining.length === 0) return true;
        const run = await settledJob(
          worker.deps.queues.maintenance,
          await worker.deps.queues.maintenance.add('refresh-statistics', {}),
        );
        expect(run.failedReason).toBeUndefined();
        return false;
      },
      60_000,
      1000,
    );
  }, 180_000);

  it('queues no vacuum after a deletion below the threshold', async () => {
    const queued = (await maintenanceJobs('vacuum-table')).length;
    const ids = await seedPersons(10, 'few-');
    await releaseWeekly(await bulkDelete(ids)); // the job enqueues before it completes: nothing can come later
    expect((await maintenanceJobs('vacuum-table')).length).toBe(queued);
  }, 60_000);

  it('refuses to vacuum a table the maintenance does not own', async () => {
    const job = await settledJob(
      worker.deps.queues.maintenance,
      await worker.deps.queues.maintenance.add('vacuum-table', { table: 'account; drop table person' }),
    );
    expect(await job.isFailed()).toBe(true);
    expect(job.failedReason).toBe('not a table the maintenance vacuums: "account; drop table person"');
  });
});
