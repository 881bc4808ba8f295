// A scrub on PostgreSQL whose match the planner reads by a sequential scan (index scans off for this
// file's connections, as a match of a large share of the table gets): walked by block ranges of each
// partition (3 rows read a statement here), it changes exactly what the count before says, in every
// partition the range touches, and nothing outside the match.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MikroORM } from '@mikro-orm/postgresql';
import { loadConfig } from '../../../shared/platform/config.ts';
import { ormConfig } from '../../../shared/platform/db/orm.ts';
import { createPostgresEventStore, type EventStore } from '../../../shared/events/index.ts';
import { sql } from '../../db.ts';
import { createAccount, type TestAccount } from '../../helpers.ts';

let orm: MikroORM;
let events: EventStore;
let account: TestAccount;
beforeAll(async () => {
  orm = await MikroORM.init({
    ...ormConfig(loadConfig().databaseUrl, 2),
    driverOptions: { options: '-c enable_indexscan=off -c enable_bitmapscan=off -c enable_indexonlyscan=off' },
  });
  events = createPostgresEventStore(orm, { deleteChunk: 3 });
  account = await createAccount(orm);
});
afterAll(() => orm?.close());

const insert = (event: string, distinctId: string, at: string, properties: Record<string, unknown>) =>
  sql(
    orm,
    `insert into event (uuid, project_id, event, distinct_id, timestamp, created_at, properties) values (?, ?, ?, ?, ?, ?, ?::jsonb)`,
    [randomUUID(), account.projectId, event, distinctId, at, at, JSON.stringify(properties)],
  );
const hooks = { record: async () => undefined, done: async () => undefined };

describe('scrub by block ranges (the planner would scan sequentially)', () => {
  it('deletes and strips exactly the matching rows, old (default partition) and recent alike', async () => {
    const recent = new Date(Date.now() - 3_600_000).toISOString();
    const old = '2019-05-01T00:00:00Z';
    for (let i = 0; i < 10; i++) {
      await insert('buy', 'blk', i % 2 ? recent : old, { i, card: i < 6 ? 'x' : 'y', secret: 's' });
      await insert('view', 'blk', recent, { i: 100 + i, card: 'x' });
    }
    const match = {
      event: 'buy',
      properties: [{ key: 'card', value: 'x', operator: 'exact', type: 'event' }],
      after: new Date('2019-01-01T00:00:00Z'),
      before: new Date(Date.now() + 3_600_000),
      distinctIds: ['blk'],
      cutoff: new Date().toISOString(),
    };
    const plan = await sql<{ 'QUERY PLAN': unknown }>(
      orm,
      `explain (format json) select 1 from event where project_id = ?`,
      [account.projectId],
    );
    expect(JSON.stringify(plan)).toContain('Seq Scan'); // the path under test
    const stripMatch = { ...match, event: null, properties: [] };
    expect(await events.scrubEventCounts(account.projectId, { ...stripMatch, keys: ['secret'] })).toEqual({
      postgres: 10,
    });
    expect(await events.scrubEventCounts(account.projectId, match)).toEqual({ postgres: 6 });
    expect(await events.scrubEvents(account.projectId, match, { kind: 'delete' }, hooks)).toEqual({ postgres: 6 });
    expect(await events.scrubEventCounts(account.projectId, match)).toEqual({ postgres: 0 });
    expect(
      await events.scrubEvents(account.projectId, stripMatch, { kind: 'strip_properties', keys: ['secret'] }, hooks),
    ).toEqual({ postgres: 4 });
    const left = await sql<{ event: string; i: number; secret: boolean }>(
      orm,
      `select event, (properties->>'i')::int as i, jsonb_exists(properties, 'secret') as secret from event
        where project_id = ? order by 2`,
      [account.projectId],
    );
    expect(left.filter((r) => r.event === 'buy').map((r) => r.i)).toEqual([6, 7, 8, 9]);
    expect(left.filter((r) => r.event === 'view')).toHaveLength(10);
    expect(left.some((r) => r.secret)).toBe(false);
  });
});
