// An access export's events as PostgreSQL holds them: one server-side cursor in a read-only
// REPEATABLE READ transaction, each row made JSON text by PostgreSQL itself (json_build_object, in C,
// as COPY would print it) and fetched in batches, the next batch read while the last is written. The
// transaction's snapshot is the export's: with EVENT_STORE=clickhouse the trimmed ranges are read in
// it first (create.ts), so ClickHouse adds exactly the events this snapshot no longer holds.
import { IsolationLevel } from '@mikro-orm/core';
import type { EntityManager } from '@mikro-orm/postgresql';
import { pgArray, rows, run } from '../platform/db/sql.ts';
import type { EventExportBatch, EventExportGroup } from './event-store.ts';

/** Rows per FETCH: large enough that a statement's round trip is a small part, small enough to hold. */
const FETCH = 5000;

/** The export's rows: its persons' uuids or distinct ids, arrived by the cutoff (any event time). */
const EXPORT_EVENTS = `project_id = ? and (person_id = any((select ?::uuid[])::uuid[]) or distinct_id = any((select ?::text[])::text[])) and created_at <= ?::timestamptz`;
const exportParams = (projectId: number, g: EventExportGroup) => [
  projectId,
  pgArray(g.personIds),
  pgArray(g.distinctIds),
  g.cutoff,
];

const iso = (column: string) => `to_char(${column} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;
/** One event as a JSON object; ClickHouse's export writes the same members in the same order and spacing. */
const LINE = `json_build_object('uuid', uuid, 'event', event, 'distinct_id', distinct_id, 'person_id', person_id,
  'timestamp', ${iso('timestamp')}, 'created_at', ${iso('created_at')}, 'properties', properties)::text`;

/**
 * The group's events from PostgreSQL, in batches handed to `write`; returns how many. `inSnapshot`
 * runs first in the same transaction (its snapshot is the cursor's).
 */
export function exportPostgresEvents(
  em: EntityManager,
  projectId: number,
  group: EventExportGroup,
  write: (batch: EventExportBatch) => Promise<void>,
  inSnapshot?: (tx: EntityManager) => Promise<void>,
): Promise<number> {
  if (group.personIds.length === 0 && group.distinctIds.length === 0) return Promise.resolve(0);
  return em.fork().transactional(
    async (tx) => {
      await inSnapshot?.(tx);
      await run(
        tx,
        `declare access_export_events no scroll cursor for select ${LINE} as l, event as e from event where ${EXPORT_EVENTS}`,
        exportParams(projectId, group),
      );
      const fetch = () => rows<{ l: string; e: string }>(tx, `fetch ${FETCH} from access_export_events`);
      let n = 0;
      let next = fetch();
      for (;;) {
        const batch = await next;
        if (batch.length === 0) break;
        n += batch.length;
        next = batch.length < FETCH ? Promise.resolve([]) : fetch();
        // A failed write abandons the read ahead; the transaction ends with the error.
        next.catch(() => undefined);
        await write({ lines: batch.map((r) => r.l), names: batch.map((r) => r.e) });
      }
      return n;
    },
    { isolationLevel: IsolationLevel.REPEATABLE_READ, readOnly: true },
  );
}

/** How many events exportPostgresEvents would hand over now. */
export async function countPostgresExportEvents(
  em: EntityManager,
  projectId: number,
  group: EventExportGroup,
): Promise<number> {
  if (group.personIds.length === 0 && group.distinctIds.length === 0) return 0;
  const [row] = await rows<{ n: number }>(
    em,
    `select count(*)::float8 as n from event where ${EXPORT_EVENTS}`,
    exportParams(projectId, group),
  );
  return Number(row.n);
}
