// Scrubs by content in PostgreSQL's `event` table (the PostgreSQL engine, and the buffer with ClickHouse
// on): the events of a project in an event-time range matching a name, property filters and distinct
// ids, up to the scrub's cutoff by arrival. They are deleted, or stripped of keys (`properties - keys`),
// in short statements (the API stays responsive): window by window in event time, each aiming at
// `chunk` rows through the (project_id, event, timestamp), (project_id, distinct_id, timestamp) or
// (project_id, timestamp) index; or, when the planner would read the match by a sequential scan (a
// large share of the table), by block ranges of each partition (`chunk` rows read a statement), so the
// table is read once, as one raw DELETE would. A row a block range missed (moved by a concurrent
// update) is a survivor the scrub's count after finds, and its retry takes it.
import type { EntityManager } from '@mikro-orm/postgresql';
import { type SqlFragment, propertyFiltersSql } from '../platform/db/property-filters.ts';
import { pgArray, quoteIdent, rows, run } from '../platform/db/sql.ts';
import { eventPartitions } from './store.ts';
import type { EventScrubAction, EventScrubMatch, ScrubHooks } from './event-store.ts';

/** The scrub's events as a condition on `event`'s columns (property filters checked: FilterError). */
export function scrubWhere(projectId: number, m: EventScrubMatch): SqlFragment {
  const parts = [
    'project_id = ?',
    'timestamp >= ?::timestamptz',
    'timestamp < ?::timestamptz',
    'created_at <= ?::timestamptz',
  ];
  const params: unknown[] = [projectId, m.after.toISOString(), m.before.toISOString(), m.cutoff];
  if (m.event !== null) {
    parts.push('event = ?');
    params.push(m.event);
  }
  if (m.distinctIds !== null) {
    // A sub-select, so the planner does not estimate each element in every partition.
    parts.push('distinct_id = any((select ?::text[])::text[])');
    params.push(pgArray(m.distinctIds));
  }
  if (m.keys !== undefined) {
    parts.push('jsonb_exists_any(properties, ?::text[])');
    params.push(pgArray(m.keys));
  }
  const filter = propertyFiltersSql(m.properties ?? [], 'properties');
  if (filter.sql !== 'true') {
    parts.push(filter.sql);
    params.push(...filter.params);
  }
  return { sql: parts.join(' and '), params };
}

/** The scrub's events now in `event`. */
export async function countScrubEvents(em: EntityManager, projectId: number, m: EventScrubMatch): Promise<number> {
  const where = scrubWhere(projectId, m);
  const [row] = await rows<{ n: number }>(
    em,
    `select count(*)::float8 as n from event where ${where.sql}`,
    where.params,
  );
  return Number(row.n);
}

/**
 * Deletes (or strips) the scrub's events window by window, oldest first: each statement's rows counted
 * in its transaction (hooks.record), then hooks.done once it committed. Returns the rows changed.
 */
export async function scrubPostgresEvents(
  em: EntityManager,
  projectId: number,
  m: EventScrubMatch,
  action: EventScrubAction,
  chunk: number,
  hooks: ScrubHooks,
): Promise<number> {
  // strip_properties changes only the events that carry a key.
  const match = action.kind === 'strip_properties' ? { ...m, keys: action.keys } : m;
  const where = scrubWhere(projectId, match);
  const change = (table: string, condition: string, params: unknown[]) =>
    action.kind === 'delete'
      ? { sql: `delete from ${table} where ${condition}`, params }
      : {
          sql: `update ${table} set properties = properties - ?::text[] where ${condition}`,
          params: [pgArray(action.keys), ...params],
        };
  // One statement in its transaction: its rows counted there (hooks.record), then hooks.done.
  const statement = async (table: string, condition: string, params: unknown[]) => {
    const n = await em.fork().transactional(async (tx) => {
      // No WAL flush wait per statement: a crash loses at most a suffix, which the scrub's retry redoes
      // (its completion is committed synchronously, after every statement).
      await run(tx, 'set local synchronous_commit = off');
      const s = change(table, condition, params);
      const changed = await run(tx, s.sql, s.params);
      if (changed > 0) await hooks.record('postgres', changed, tx);
      return changed;
    });
    await hooks.done('postgres', n);
    return n;
  };
  // A match the planner would read by a sequential scan anyway (a large share of a partition) is walked
  // by block ranges of each partition the range touches: one pass over the table in short statements,
  // where windows of event time would each scan it again.
  const [plan] = await rows<{ plan: unknown }>(
    em,
    `explain (format json) select 1 from event where ${where.sql}`,
    where.params,
  );
  if (JSON.stringify(plan).includes('Seq Scan')) {
    let total = 0;
    for (const table of await partitionsBetween(em, m.after, m.before)) {
      const [size] = await rows<{ pages: number; tuples: number }>(
        em,
        `select (pg_relation_size(c.oid) / current_setting('block_size')::int)::float8 as pages,
                greatest(c.reltuples, 0)::float8 as tuples from pg_class c where c.oid = ?::regclass`,
        [table],
      );
      const pages = Number(size.pages);
      // Blocks per statement: about `chunk` rows read (not changed) each.
      const step = Math.max(1, Math.floor(chunk / Math.max(1, Number(size.tuples) / Math.max(1, pages))));
      for (let block = 0; block < pages; block += step)
        total += await statement(
          quoteIdent(table),
          `ctid >= '(${block},0)'::tid and ctid < '(${block + step},0)'::tid and ${where.sql}`,
          where.params,
        );
    }
    return total;
  }
  const lo = m.after.getTime();
  const hi = m.before.getTime();
  let total = 0;
  // Start at a sixteenth of the range and let the row counts size the windows.
  let span = Math.max(1000, Math.floor((hi - lo) / 16));
  for (let from = lo; from < hi; ) {
    const to = Math.min(from + span, hi);
    const window = `${where.sql} and timestamp >= to_timestamp(?::float8 / 1000) and timestamp < to_timestamp(?::float8 / 1000)`;
    const params = [...where.params, from, to];
    const n = await statement('event', window, params);
    total += n;
    // Aim the next window at `chunk` rows, changing its length at most eightfold per step.
    span = Math.max(1, Math.floor(n === 0 ? span * 8 : Math.min(span * 8, Math.max(span / 8, (span * chunk) / n))));
    from = to;
  }
  return total;
}

/** The event partitions that can hold events in [after, before): the months it touches and the others (default). */
async function partitionsBetween(em: EntityManager, after: Date, before: Date): Promise<string[]> {
  const { months, others } = await eventPartitions(em);
  return [...months.filter((p) => p.from < before && p.to > after).map((p) => p.name), ...others];
}
