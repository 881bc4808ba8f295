// The PostgreSQL event store's deletion counts by (person uuid, distinct id), what receipts count as
// found before: each window's counts add up to exactly the rows it deleted, and over the windows to a
// direct count taken before, a row recorded under one person's uuid and another's distinct id counted
// once under its own pair; the same with a pool of a single connection.
import { randomUUID } from 'node:crypto';
import type { EntityManager, MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../../shared/platform/config.ts';
import { initOrm } from '../../../shared/platform/db/orm.ts';
import { rows, run } from '../../../shared/platform/db/sql.ts';
import type { DeletedKeyCount } from '../../../shared/events/event-store.ts';
import { createPostgresEventStore } from '../../../shared/events/postgres.ts';
import { createAccount } from '../../helpers.ts';

const orms: MikroORM[] = [];
let projectId: number;

beforeAll(async () => {
  const config = loadConfig();
  orms.push(await initOrm(config.databaseUrl), await initOrm(config.databaseUrl, 1));
  projectId = (await createAccount(orms[0])).projectId;
});

afterAll(async () => {
  for (const orm of orms) await orm.close();
});

describe('deletePersonEvents counts by key', () => {
  it.each([
    ['with a pool of connections', 0],
    ['with a pool of one connection', 1],
  ])('%s: the counts of every window add up to the rows it deleted and to a count before', async (_, which) => {
    const orm = orms[which];
    const em = () => orm.em.fork() as EntityManager;
    const [a, b] = [randomUUID(), randomUUID()];
    const [da, db] = [`a-${a}`, `b-${b}`];
    // A's events over 30 days (several windows at 2 rows each), one of B's, and one recorded under A's
    // uuid with B's distinct id (it counts for both keys' pair once, under that pair).
    await run(
      em(),
      `insert into event (uuid, project_id, event, distinct_id, person_id, properties, timestamp, created_at)
       select gen_random_uuid(), ?, 'e', ?, ?::uuid, '{}'::jsonb, now() - g * interval '1 day', now() - interval '1 hour'
         from generate_series(1, 30) g
       union all select gen_random_uuid(), ?, 'e', ?, ?::uuid, '{}'::jsonb, now() - interval '2 days', now() - interval '1 hour'
       union all select gen_random_uuid(), ?, 'e', ?, ?::uuid, '{}'::jsonb, now() - interval '3 days', now() - interval '1 hour'`,
      [projectId, da, a, projectId, db, b, projectId, db, a],
    );
    const cutoff = (await rows<{ now: string }>(em(), `select now()::text as now`))[0].now;
    const group = { cutoff, personIds: [a, b], distinctIds: [da, db] };
    const store = createPostgresEventStore(orm, { deleteChunk: 2 });
    const before = await store.personEventCounts(projectId, group);
    const key = (c: { personId: string | null; distinctId: string }) => `${c.personId} ${c.distinctId}`;
    const windows: { counted: number; deleted: number }[] = [];
    const total = new Map<string, number>();
    let pending: DeletedKeyCount[] = [];
    const n = await store.deletePersonEvents(projectId, [group], {
      recordKeys: async (counts) => {
        pending = counts;
      },
      record: async (deleted) => {
        windows.push({ counted: pending.reduce((sum, c) => sum + c.n, 0), deleted });
        for (const c of pending) total.set(key(c), (total.get(key(c)) ?? 0) + c.n);
        pending = [];
      },
      done: async () => undefined,
    });
    expect(n).toBe(32);
    expect(windows.length).toBeGreaterThan(2);
    for (const w of windows) expect(w.counted).toBe(w.deleted);
    expect(Object.fromEntries(total)).toEqual(Object.fromEntries(before.map((c) => [key(c), c.n])));
    expect(Object.fromEntries(total)).toEqual({ [`${a} ${da}`]: 30, [`${b} ${db}`]: 1, [`${a} ${db}`]: 1 });
    expect(await store.countPersonEvents(projectId, [group])).toBe(0);
  });
});
