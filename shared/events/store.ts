// Writing events: one implementation for capture and for the person endpoints that record the
// event equivalent to their change ($set, $delete_person_property).
import type { EventRow } from './event-store.ts';
import type { EntityManager } from '@mikro-orm/postgresql';
import { rows, runBound } from '../platform/db/sql.ts';
import { type DefinitionKey, upsertEventDefinitions } from '../event-definitions/index.ts';

/** Events per multi-row INSERT of storeEvents(). */
export const EVENTS_PER_INSERT = 500;

/**
 * Inserts events with multi-row INSERTs (a repeated uuid is ignored, so SDK retries are harmless)
 * and upserts their event definitions. Pass the transaction's `em` for atomicity with person changes.
 */
export async function storeEvents(em: EntityManager, rows: EventRow[], now = new Date()): Promise<DefinitionKey[]> {
  if (rows.length === 0) return [];
  for (let start = 0; start < rows.length; start += EVENTS_PER_INSERT) {
    const chunk = rows.slice(start, start + EVENTS_PER_INSERT);
    const values: unknown[] = [];
    const nowText = now.toISOString();
    const tuples = chunk.map((row, k) => {
      values.push(
        row.uuid,
        row.projectId,
        row.event,
        row.distinctId,
        row.personId,
        JSON.stringify(row.properties),
        row.timestamp.toISOString(),
        nowText,
      );
      const b = k * 8;
      return `($${b + 1}::uuid, $${b + 2}::int, $${b + 3}, $${b + 4}, $${b + 5}::uuid, $${b + 6}::jsonb, $${b + 7}::timestamptz, $${b + 8}::timestamptz)`;
    });
    // Parameters sent beside the statement, not formatted into it (see runBound).
    await runBound(
      em,
      `insert into event (uuid, project_id, event, distinct_id, person_id, properties, timestamp, created_at)
       values ${tuples.join(', ')} on conflict do nothing`,
      values,
    );
  }
  return upsertEventDefinitions(em, rows, now);
}

/** PostHog's check: whether recent events of these names carry `$feature/…` properties (the SDK sends flag values). */
export async function recentEventsCarryFlagValues(em: EntityManager, projectId: number, events: string[]) {
  const [row] = await rows<{ has_flags: boolean }>(
    em,
    `select exists (
       select 1 from (select properties from event
                       where project_id = ? and event in (?) and timestamp > now() - interval '7 days' limit 20) s
        where exists (select 1 from jsonb_object_keys(s.properties) k where k like '$feature/%')) as has_flags`,
    [projectId, events],
  );
  return row.has_flags;
}

// ---- partitions (monthly; the function is migration 0019's ensure_event_partitions) ----

/** Creates the monthly partitions due in the next `monthsAhead` months; returns the new tables' names. */
export async function ensureEventPartitions(em: EntityManager, monthsAhead: number): Promise<string[]> {
  const created = await rows<{ name: string }>(em, `select ensure_event_partitions(?) as name`, [monthsAhead]);
  return created.map((r) => r.name);
}

/** Where the event table's first monthly partition begins, read from the catalog (null: none yet). */
export async function firstMonthlyPartitionStart(em: EntityManager): Promise<string | null> {
  const [{ start }] = await rows<{ start: string | null }>(
    em,
    `select min(substring(pg_get_expr(c.relpartbound, c.oid) from $$FROM \\('([^']+)'\\)$$)::timestamptz)::text as start
       from pg_inherits i join pg_class c on c.oid = i.inhrelid where i.inhparent = 'event'::regclass`,
  );
  return start;
}

export interface MonthPartition {
  name: string;
  from: Date;
  to: Date;
}

/** The event table's partitions from the catalog: the monthly ones with their bounds, oldest first, and the others (the default). */
export async function eventPartitions(em: EntityManager): Promise<{ months: MonthPartition[]; others: string[] }> {
  const found = await rows<{ name: string; lo: Date | null; hi: Date | null }>(
    em,
    `select c.relname as name, substring(b from $$FROM \\('([^']+)'\\)$$)::timestamptz as lo,
            substring(b from $$TO \\('([^']+)'\\)$$)::timestamptz as hi
       from pg_inherits i join pg_class c on c.oid = i.inhrelid
      cross join lateral pg_get_expr(c.relpartbound, c.oid) b
      where i.inhparent = 'event'::regclass
      order by lo nulls last, name`,
  );
  return {
    months: found
      .filter((p) => p.lo && p.hi)
      .map((p) => ({ name: p.name, from: new Date(p.lo!), to: new Date(p.hi!) })),
    others: found.filter((p) => !p.lo || !p.hi).map((p) => p.name),
  };
}
