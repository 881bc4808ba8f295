// Event definitions as events arrive: created on the first event of a name, last_seen_at moved forward
// (at most once a minute per name and process). The one writer of event_definition besides the API's
// edits (store.ts); the event store calls it in the transaction that stores the events.
import type { EntityManager } from '@mikro-orm/postgresql';
import { randomUUID } from 'node:crypto';
import { run } from '../platform/db/sql.ts';

/** last_seen_at moves at most this often per definition (PostHog throttles these writes too). */
const LAST_SEEN_RESOLUTION_SECONDS = 60;

// Definitions this process wrote in a committed transaction, by project and name, with when: for
// LAST_SEEN_RESOLUTION_SECONDS after that, upsertEventDefinitions() has nothing to do for them (they
// exist and their last_seen_at is fresh), so a request whose event names are all here skips the
// statement. A definition deleted through the API is forgotten here; another API process still
// remembers it, and recreates it with the first event of that name after at most that minute.
const definitionsWritten = new Map<string, number>();
const definitionKey = (projectId: number, name: string) => `${projectId}\u0000${name}`;

export interface DefinitionKey {
  projectId: number;
  event: string;
}

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
