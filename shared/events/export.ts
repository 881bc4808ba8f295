// An access export's events as PostgreSQL holds them: one server-side cursor in a read-only
// REPEATABLE READ transaction, its columns as text (as COPY prints them) made a JSON line each here,
// fetched in batches, the next batch read while the last is written. The
// transaction's snapshot is the export's: with EVENT_STORE=clickhouse the trimmed ranges are read in
// it first (create.ts), so ClickHouse adds exactly the events this snapshot no longer holds.
import { IsolationLevel } from '@mikro-orm/core';
import type { EntityManager } from '@mikro-orm/postgresql';
import { pgArray, rows, run } from '../platform/db/sql.ts';
import type { EventExportBatch, EventExportGroup } from './event-store.ts';

/** Rows per FETCH: large enough that a statement's round trip is a small part, small enough to hold. */
const FETCH = 10_000;

/** The export's rows: its persons' uuids or distinct ids, arrived by the cutoff (any event time). */
const EXPORT_EVENTS = `project_id = ? and (person_id = any((select ?::uuid[])::uuid[]) or distinct_id = any((select ?::text[])::text[])) and created_at <= ?::timestamptz`;
const exportParams = (projectId: number, g: EventExportGroup) => [
  projectId,
  pgArray(g.personIds),
  pgArray(g.distinctIds),
  g.cutoff,
];

/** The columns an export line is made of, as text: what COPY would print (the session's time zone UTC). */
const COLUMNS = `uuid::text as u, event as e, distinct_id as d, person_id::text as p, timestamp::text as t,
  created_at::text as c, properties::text as j`;

/** 'YYYY-MM-DD hh:mm:ss[.f…]+00' (PostgreSQL's and ClickHouse's text, UTC) → ISO 8601 with microseconds. */
export function isoMicros(text: string): string {
  const zone = text.endsWith('+00') ? text.length - 3 : text.length;
  const fraction = text.slice(20, zone);
  return `${text.slice(0, 10)}T${text.slice(11, 19)}.${fraction.padEnd(6, '0')}Z`;
}

/**
 * One event as an export line, whichever store held it: its members in this order, the properties as
 * the store's JSON text. Built here rather than in SQL: json_build_object with to_char cost PostgreSQL
 * about three times a COPY of the same columns.
 */
export const exportLine = (r: { u: string; e: string; d: string; p: string | null; t: string; c: string; j: string }) =>
  `{"uuid":"${r.u}","event":${JSON.stringify(r.e)},"distinct_id":${JSON.stringify(r.d)},"person_id":${
    r.p === null ? 'null' : `"${r.p}"`
  },"timestamp":"${isoMicros(r.t)}","created_at":"${isoMicros(r.c)}","properties":${r.j === '' ? '{}' : r.j}}`;

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
      await run(tx, `set local timezone = 'UTC'`);
      await run(
        tx,
        `declare access_export_events no scroll cursor for select ${COLUMNS} from event where ${EXPORT_EVENTS}`,
        exportParams(projectId, group),
      );
      const fetch = () => rows<Parameters<typeof exportLine>[0]>(tx, `fetch ${FETCH} from access_export_events`);
      let n = 0;
      let next = fetch();
      for (;;) {
        const batch = await next;
        if (batch.length === 0) break;
        n += batch.length;
        next = batch.length < FETCH ? Promise.resolve([]) : fetch();
        // A failed write abandons the read ahead; the transaction ends with the error.
        next.catch(() => undefined);
        await write({ lines: batch.map(exportLine), names: batch.map((r) => r.e) });
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
