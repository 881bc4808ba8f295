// Scrubs by content in PostgreSQL's `event` table (the PostgreSQL engine, and the buffer with ClickHouse
// on): the events of a project in an event-time range matching a name, property filters and distinct
// ids, up to the scrub's cutoff by arrival. They are deleted, or stripped of keys (`properties - keys`),
// window by window in event time: each statement aims at `chunk` rows (short statements, the API stays
// responsive), through the (project_id, event, timestamp), (project_id, distinct_id, timestamp) or
// (project_id, timestamp) index.
import type { EntityManager } from '@mikro-orm/postgresql';
import { type SqlFragment, propertyFiltersSql } from '../platform/db/property-filters.ts';
import { pgArray, rows, run } from '../platform/db/sql.ts';
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
  const [row] = await rows<{ n: number }>(em, `select count(*)::float8 as n from event where ${where.sql}`, where.params);
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
  const lo = m.after.getTime();
  const hi = m.before.getTime();
  let total = 0;
  // Start at a sixteenth of the range and let the row counts size the windows.
  let span = Math.max(1000, Math.floor((hi - lo) / 16));
  for (let from = lo; from < hi; ) {
    const to = Math.min(from + span, hi);
    const window = `${where.sql} and timestamp >= to_timestamp(?::float8 / 1000) and timestamp < to_timestamp(?::float8 / 1000)`;
    const params = [...where.params, from, to];
    const n = await em.fork().transactional(async (tx) => {
      // No WAL flush wait per window: a crash loses at most a suffix, which the scrub's retry redoes
      // (its completion is committed synchronously, after every window).
      await run(tx, 'set local synchronous_commit = off');
      const changed =
        action.kind === 'delete'
          ? await run(tx, `delete from event where ${window}`, params)
          : await run(tx, `update event set properties = properties - ?::text[] where ${window}`, [
              pgArray(action.keys),
              ...params,
            ]);
      if (changed > 0) await hooks.record('postgres', changed, tx);
      return changed;
    });
    total += n;
    await hooks.done('postgres', n);
    // Aim the next window at `chunk` rows, changing its length at most eightfold per step.
    span = Math.max(1, Math.floor(n === 0 ? span * 8 : Math.min(span * 8, Math.max(span / 8, (span * chunk) / n))));
    from = to;
  }
  return total;
}
