// Writing events: one implementation for capture and for the person endpoints that record the
// event equivalent to their change ($set, $delete_person_property).
import type { EntityManager } from '@mikro-orm/postgresql';
import { randomUUID } from 'node:crypto';
import { rows, run, runBound } from '../db/sql.ts';

export interface EventRow {
  uuid: string;
  projectId: number;
  event: string;
  distinctId: string;
  /** The person's uuid at ingestion time (null for personless events). */
  personId: string | null;
  properties: Record<string, unknown>;
  timestamp: Date;
}

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

/** last_seen_at moves at most this often per definition (PostHog throttles these writes too). */
const LAST_SEEN_RESOLUTION_SECONDS = 60;

// Definitions this process wrote in a committed transaction, by project and name, with when: for
// LAST_SEEN_RESOLUTION_SECONDS after that, upsertEventDefinitions() has nothing to do for them (they
// exist and their last_seen_at is fresh), so a request whose event names are all here skips the
// statement. A definition deleted through the API is forgotten here; another API process still
// remembers it, and recreates it with the first event of that name after at most that minute.
const definitionsWritten = new Map<string, number>();
const definitionKey = (projectId: number, name: string) => `${projectId}\u0000${name}`;

type DefinitionKey = Pick<EventRow, 'projectId' | 'event'>;

/** Call with what storeEvents() returned once its transaction has committed. */
export function rememberEventDefinitions(rows: DefinitionKey[], seenAt: Date): void {
  if (definitionsWritten.size > 100_000) definitionsWritten.clear();
  for (const row of rows) definitionsWritten.set(definitionKey(row.projectId, row.event), seenAt.getTime());
}

const isFresh = (key: string, freshSince: number) => (definitionsWritten.get(key) ?? -Infinity) > freshSince;

/** Whether upsertEventDefinitions(em, rows, seenAt) has nothing to write (so storeEvents sends no statement for them). */
export function definitionsFresh(rows: DefinitionKey[], seenAt: Date): boolean {
  const freshSince = seenAt.getTime() - LAST_SEEN_RESOLUTION_SECONDS * 1000;
  return rows.every((row) => isFresh(definitionKey(row.projectId, row.event), freshSince));
}

/** A deleted definition: the next event of that name recreates it. */
export function forgetEventDefinition(projectId: number, name: string): void {
  definitionsWritten.delete(definitionKey(projectId, name));
}

/**
 * Creates missing definitions and moves last_seen_at forward; returns the definitions it wrote (those
 * this process wrote less than a minute before are left out). The statement locks no definition that
 * needs no change: DO NOTHING takes no row lock, and the update only touches rows more than a minute
 * stale. (An upsert with DO UPDATE would lock every shared definition row until commit and
 * serialise concurrent ingestion.)
 */
export async function upsertEventDefinitions(
  em: EntityManager,
  rows: DefinitionKey[],
  seenAt = new Date(),
): Promise<DefinitionKey[]> {
  const unique = new Map<string, { projectId: number; event: string }>();
  const freshSince = seenAt.getTime() - LAST_SEEN_RESOLUTION_SECONDS * 1000;
  for (const row of rows) {
    const key = definitionKey(row.projectId, row.event);
    if (!isFresh(key, freshSince)) unique.set(key, row);
  }
  if (unique.size === 0) return [];
  const entries = [...unique.values()].sort((a, b) => a.projectId - b.projectId || (a.event < b.event ? -1 : 1)); // fixed lock order
  const payload = JSON.stringify(entries.map((e) => ({ id: randomUUID(), project_id: e.projectId, name: e.event })));
  // One statement: the update does not see the rows its insert adds (one snapshot), which are fresh anyway.
  await run(
    em,
    `with d as (select * from jsonb_to_recordset(?::jsonb) as d(id uuid, project_id int, name text)),
     created as (insert into event_definition (id, project_id, name, created_at, last_seen_at)
                 select d.id, d.project_id, d.name, ?::timestamptz, ?::timestamptz from d
                 on conflict (project_id, name) do nothing)
     update event_definition e set last_seen_at = ?::timestamptz
       from d
      where e.project_id = d.project_id and e.name = d.name
        and (e.last_seen_at is null or e.last_seen_at < ?::timestamptz - make_interval(secs => ?))`,
    [payload, seenAt, seenAt, seenAt, seenAt, LAST_SEEN_RESOLUTION_SECONDS],
  );
  return entries;
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
