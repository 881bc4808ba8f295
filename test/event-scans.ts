// Measuring how many event rows a job's statements read: events and persons inserted straight into
// the tables, and the statements a job ran replayed under EXPLAIN ANALYZE in one transaction.
import type { EventStore } from '../shared/events/event-store.ts';
import { createPostgresEventStore } from '../shared/events/postgres.ts';
import type { EntityManager, MikroORM } from '@mikro-orm/postgresql';
import { vi } from 'vitest';
import { initOrm } from '../shared/platform/db/orm.ts';
import { sql } from './db.ts';

export interface Row {
  person: string;
  distinctId: string;
  event: string;
  at: Date;
  properties?: Record<string, unknown>;
}

/** Persons (one per `person` key, with every distinct id it uses) and their events, straight into the tables. */
export async function insertEvents(orm: MikroORM, projectId: number, rows: Row[]) {
  const ids = new Map<string, Set<string>>();
  for (const r of rows) ids.set(r.person, (ids.get(r.person) ?? new Set()).add(r.distinctId));
  const persons = [...ids].map(([person, distinctIds]) => ({ person, distinct_ids: [...distinctIds] }));
  await sql(
    orm,
    `with p as (select * from jsonb_to_recordset(?::jsonb) as p(person text, distinct_ids text[])),
          made as (insert into person (uuid, project_id) select gen_random_uuid(), ? from p returning id, uuid),
          numbered as (select m.id, row_number() over (order by m.id) as i from made m),
          keyed as (select p.*, row_number() over () as i from p)
     insert into person_distinct_id (project_id, person_id, distinct_id)
     select ?, n.id, unnest(k.distinct_ids) from keyed k join numbered n using (i)`,
    [JSON.stringify(persons), projectId, projectId],
  );
  await insertEventRows(orm, projectId, rows);
}

/** Events alone, straight into the table (their persons exist already). */
export async function insertEventRows(orm: MikroORM, projectId: number, rows: Row[]) {
  const events = rows.map((r) => ({
    event: r.event,
    distinct_id: r.distinctId,
    properties: r.properties ?? {},
    timestamp: r.at.toISOString(),
  }));
  await sql(
    orm,
    `insert into event (uuid, project_id, event, distinct_id, properties, timestamp)
     select gen_random_uuid(), ?, e.event, e.distinct_id, e.properties, e.timestamp
       from jsonb_to_recordset(?::jsonb) as e(event text, distinct_id text, properties jsonb, timestamp timestamptz)`,
    [projectId, JSON.stringify(events)],
  );
}

export const exposure = (flag: string, person: string, variant: string, when: Date, distinctId = person): Row => ({
  person,
  distinctId,
  event: '$feature_flag_called',
  at: when,
  properties: { $feature_flag: flag, $feature_flag_response: variant },
});

/** Rows read from the event table (any partition) by one plan: rows returned plus rows filtered out, over all loops. */
export function eventRowsScanned(node: any): number {
  const count = (key: string) => node[key] ?? 0;
  const read = count('Actual Rows') + count('Rows Removed by Filter') + count('Rows Removed by Index Recheck');
  const isEvent = /^event(_default|_y\d{4}m\d{2})?$/.test(node['Relation Name'] ?? '');
  const own = isEvent ? read * (node['Actual Loops'] ?? 1) : 0;
  return own + (node.Plans ?? []).reduce((sum: number, child: any) => sum + eventRowsScanned(child), 0);
}

/**
 * Runs `work` with an ORM of its own on `url` (so the spy sees only its statements, not those of
 * whatever else the process runs meanwhile) and counts the event rows its statements read.
 */
export async function eventRowsRead<T>(
  url: string,
  work: (orm: MikroORM, events: EventStore) => Promise<T>,
): Promise<{ rows: number; value: T }> {
  const orm = await initOrm(url);
  // The PostgreSQL event store on the same connection, so its statements are counted too.
  const events = createPostgresEventStore(orm, { deleteChunk: 10_000 });
  const conn = orm.em.getConnection();
  // Statements in a transaction go through the connection; those outside one straight to the pool
  // (shared/platform/db/sql.ts, rows): both are recorded, in the order they ran.
  const pool = (await conn.getNativeClient()) as unknown as { query: (sql: string) => Promise<unknown> };
  const spy = vi.spyOn(conn, 'execute');
  const poolSpy = vi.spyOn(pool, 'query');
  let value: T;
  let calls: unknown[][];
  try {
    value = await work(orm, events);
  } finally {
    // (restoring clears them)
    const ordered = [
      ...spy.mock.calls.map((c, i) => ({ call: c as unknown[], order: spy.mock.invocationCallOrder[i] })),
      ...poolSpy.mock.calls.map((c, i) => ({ call: c as unknown[], order: poolSpy.mock.invocationCallOrder[i] })),
    ];
    calls = ordered.sort((a, b) => a.order - b.order).map((c) => c.call);
    spy.mockRestore();
    poolSpy.mockRestore();
  }
  // Replayed in order in one transaction (so temporary tables and settings exist as they did);
  // writes and plans asked for (EXPLAIN: an estimate, nothing read) are left out, and every statement
  // that reads the event table runs under EXPLAIN ANALYZE.
  const replay = calls.filter(
    ([query]) => typeof query === 'string' && !/^\s*(insert|update|delete|explain)\b/i.test(query),
  );
  const reads = replay.filter(([query]) => /\bevent\b/.test(query as string));
  let rows = 0;
  await (orm.em.fork() as EntityManager).transactional(async (tx) => {
    const ctx = tx.getTransactionContext();
    // On a few hundred events a sequential scan of the month's partition is the cheapest plan, and it
    // counts every row of the month (the later days too): the count would measure the planner's choice
    // on tiny data, not how often the statements read each event. Without it the statements use the
    // indexes, as they do at volume.
    await tx.getConnection().execute('set local enable_seqscan = off', [], 'run', ctx);
    for (const [query, params] of replay) {
      if (!reads.some(([q]) => q === query)) {
        await tx.getConnection().execute(query as string, (params as unknown[]) ?? [], 'run', ctx);
        continue;
      }
      const explain = `explain (analyze, format json) ${query as string}`;
      const [plan] = await tx.getConnection().execute<any[]>(explain, (params as unknown[]) ?? [], 'all', ctx);
      rows += eventRowsScanned(plan['QUERY PLAN'][0].Plan);
    }
  });
  await orm.close();
  return { rows, value };
}
