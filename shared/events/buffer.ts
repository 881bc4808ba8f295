// With EVENT_STORE=clickhouse PostgreSQL's `event` table is a buffer: capture writes there, the shipper
// copies events to ClickHouse in (created_at, uuid) order (shipper.ts), and an event shipped and older
// than EVENT_BUFFER_HOURS (by created_at) is removed from PostgreSQL here; ClickHouse alone holds it.
//
// What goes: the events at or before the trim's line, `upTo` = the main shipment's mark (everything
// at or before it is in ClickHouse: the mark moves only after ClickHouse took the batch) or, when the
// mark is younger than the buffer, the last position stored before now − EVENT_BUFFER_HOURS. An
// unshipped event is past the mark, so it is never removed. The trim only reads the mark (it moves
// only forward), never writes the shipment's row nor waits for its lock: it cannot race the shipper.
//
// How: first every monthly partition whose last row (an index probe of its (created_at, uuid) index)
// is at or before the line is emptied whole with TRUNCATE, checked again under the partition's ACCESS
// EXCLUSIVE lock (no row is read; waiting at most lockTimeoutMs, else it is left to the walk); then a
// walk in (created_at, uuid) order deletes the rest in statements of `chunk` rows (DELETION_CHUNK_SIZE).
//
// `event_trim` records what is gone (migration 0053): the walk's mark over every timestamp, and the
// last row's mark of each partition emptied whole over that month's timestamps (dropped once the walk
// passes it). Each mark moves in the transaction that removes its rows, so in any snapshot PostgreSQL
// holds an event exactly when `trimmedRanges` does not cover it. With ClickHouse on, a deletion's or
// retention's counts add ClickHouse's events in those ranges to PostgreSQL's (create.ts).
import type { EntityManager } from '@mikro-orm/postgresql';
import { sql } from 'kysely';
import { db } from '../platform/db/kysely.ts';
import { quoteIdent, rows, run } from '../platform/db/sql.ts';
import { indexOrdered, SHIPMENT_TARGET, ZERO_UUID } from './shipper.ts';
import { eventPartitions } from './store.ts';

const MAX_UUID = 'ffffffff-ffff-ffff-ffff-ffffffffffff';

/** A (created_at, uuid) position, created_at as PostgreSQL's text (its microseconds kept). */
export interface Position {
  createdAt: string;
  uuid: string;
}

/**
 * Events PostgreSQL no longer holds: timestamp in [from, to) (null: unbounded) and (created_at, uuid)
 * at or before the mark. Times as 'YYYY-MM-DD hh:mm:ss.ffffff' UTC (ClickHouse's DateTime64 text).
 */
export interface TrimmedRange {
  from: string | null;
  to: string | null;
  createdAt: string;
  uuid: string;
}

const utc = (column: string) => `to_char(${column} at time zone 'UTC', 'YYYY-MM-DD HH24:MI:SS.US')`;

/** What the trim has removed from PostgreSQL so far ([] before its first run). */
export async function trimmedRanges(em: EntityManager): Promise<TrimmedRange[]> {
  return rows<TrimmedRange>(
    em,
    `select case when isfinite(ts_from) then ${utc('ts_from')} end as "from",
            case when isfinite(ts_to) then ${utc('ts_to')} end as "to",
            ${utc('created_at')} as "createdAt", uuid::text as uuid
       from event_trim where isfinite(created_at) order by ts_from, ts_to`,
  );
}

export const sameRanges = (a: TrimmedRange[], b: TrimmedRange[]) => JSON.stringify(a) === JSON.stringify(b);

export interface TrimOptions {
  /** Events stored (created_at) less than this long ago stay (EVENT_BUFFER_HOURS). */
  bufferHours: number;
  /** Rows a delete statement removes at most (DELETION_CHUNK_SIZE). */
  chunk: number;
  /** How long emptying a partition waits for its lock before its rows are left to the walk. */
  lockTimeoutMs: number;
}

export interface TrimResult {
  /** Another trim held the lock: this one did nothing. */
  skipped: boolean;
  /** The line: events at or before it are gone from PostgreSQL (null: nothing shipped yet). */
  upTo: Position | null;
  /** Partitions emptied whole (TRUNCATE, no row read), with their rows as the statistics estimate them. */
  partitionsEmptied: { name: string; estimatedRows: number }[];
  /** Partitions wholly past the line whose lock was not had in time (their rows went by the walk). */
  partitionsBusy: string[];
  /** Rows removed by the walk's deletes, and in how many statements. */
  rowsDeleted: number;
  statements: number;
}

/** Removes from PostgreSQL the shipped events stored more than `bufferHours` ago (see the top of this file). */
export async function trimShippedEvents(orm: { em: EntityManager }, options: TrimOptions): Promise<TrimResult> {
  const em = orm.em.fork();
  const result: TrimResult = {
    skipped: false,
    upTo: null,
    partitionsEmptied: [],
    partitionsBusy: [],
    rowsDeleted: 0,
    statements: 0,
  };
  await db(em)
    .insertInto('event_trim')
    .values({
      ts_from: sql<Date>`'-infinity'`,
      ts_to: sql<Date>`'infinity'`,
      created_at: sql<Date>`'-infinity'`,
      uuid: ZERO_UUID,
    })
    .onConflict((c) => c.columns(['ts_from', 'ts_to']).doNothing())
    .execute();
  // Each step is a transaction holding the walk's row: one trim at a time.
  const locked = <T>(step: (tx: EntityManager, walked: Position) => Promise<T>) =>
    em.transactional(async (tx) => {
      const [walked] = await rows<Position>(
        tx,
        `select created_at::text as "createdAt", uuid::text as uuid from event_trim
          where ts_from = '-infinity' and ts_to = 'infinity' for update skip locked`,
      );
      return walked ? { value: await step(tx, walked) } : null;
    });

  const line = await locked(async (tx) => {
    const [found] = await rows<Position>(
      tx,
      `select case when s.created_at < l.line then s.created_at else l.line - interval '1 microsecond' end::text as "createdAt",
              case when s.created_at < l.line then s.uuid else ?::uuid end::text as uuid
         from event_shipment s cross join (select now() - make_interval(hours => ?) as line) l
        where s.target = ? and isfinite(s.created_at)`,
      [MAX_UUID, options.bufferHours, SHIPMENT_TARGET],
    );
    return found ?? null;
  });
  if (line === null) return { ...result, skipped: true };
  const upTo = line.value;
  if (upTo === null) return result;
  result.upTo = upTo;

  // Partitions wholly at or before the line: emptied without reading their rows.
  const past = `(created_at, uuid) <= (?::timestamptz, ?::uuid)`;
  const lastRow = (tx: EntityManager, table: string) =>
    rows<Position & { past: boolean }>(
      tx,
      `select created_at::text as "createdAt", uuid::text as uuid, ${past} as past
         from ${quoteIdent(table)} order by created_at desc, uuid desc limit 1`,
      [upTo.createdAt, upTo.uuid],
    );
  for (const month of (await eventPartitions(em)).months) {
    const [last] = await lastRow(em, month.name);
    if (!last?.past) continue;
    try {
      const emptied = await locked(async (tx) => {
        await run(tx, `set local lock_timeout = ${Math.max(1, Math.floor(options.lockTimeoutMs))}`);
        await run(tx, `lock table ${quoteIdent(month.name)} in access exclusive mode`);
        // Under the lock no row can arrive: the last row again, as it is now.
        const [now] = await lastRow(tx, month.name);
        if (!now?.past) return null;
        const [{ n }] = await rows<{ n: number }>(
          tx,
          `select greatest(reltuples, 0)::float8 as n from pg_class where oid = ?::regclass`,
          [month.name],
        );
        await run(tx, `truncate table ${quoteIdent(month.name)}`);
        await run(
          tx,
          `insert into event_trim (ts_from, ts_to, created_at, uuid) values (?::timestamptz, ?::timestamptz, ?::timestamptz, ?::uuid)
           on conflict (ts_from, ts_to) do update set created_at = excluded.created_at, uuid = excluded.uuid, updated_at = now()
            where (event_trim.created_at, event_trim.uuid) < (excluded.created_at, excluded.uuid)`,
          [month.from, month.to, now.createdAt, now.uuid],
        );
        return Number(n);
      });
      if (emptied === null) return { ...result, skipped: true };
      if (emptied.value !== null) result.partitionsEmptied.push({ name: month.name, estimatedRows: emptied.value });
    } catch (error) {
      const code = (error as { code?: string }).code;
      if (code === '55P03')
        result.partitionsBusy.push(month.name); // lock_not_available
      else if (code !== '42P01') throw error; // undefined_table: dropped by retention meanwhile
    }
  }

  // The rest, in (created_at, uuid) order from the walk's mark: each statement deletes the range up to
  // the chunk's last position (found by an index walk of `chunk` entries), so every partition deletes
  // through its own (created_at, uuid) index; the mark moves to that position (to the line once fewer
  // are left) in the same transaction.
  for (let more = true; more; ) {
    const step = await locked(async (tx, walked) => {
      await indexOrdered(tx);
      const [bound] = await rows<Position>(
        tx,
        `select created_at::text as "createdAt", uuid::text as uuid from event
          where (created_at, uuid) > (?::timestamptz, ?::uuid) and ${past}
          order by created_at, uuid offset ? limit 1`,
        [walked.createdAt, walked.uuid, upTo.createdAt, upTo.uuid, options.chunk - 1],
      );
      const mark = bound ?? upTo;
      const deleted = await run(
        tx,
        `delete from event where (created_at, uuid) > (?::timestamptz, ?::uuid) and (created_at, uuid) <= (?::timestamptz, ?::uuid)`,
        [walked.createdAt, walked.uuid, mark.createdAt, mark.uuid],
      );
      await run(
        tx,
        `update event_trim set created_at = ?::timestamptz, uuid = ?::uuid, updated_at = now()
          where ts_from = '-infinity' and ts_to = 'infinity' and (created_at, uuid) < (?::timestamptz, ?::uuid)`,
        [mark.createdAt, mark.uuid, mark.createdAt, mark.uuid],
      );
      if (!bound)
        // The walk has passed every emptied partition's mark: those ranges are inside its own now.
        await run(
          tx,
          `delete from event_trim where not (ts_from = '-infinity' and ts_to = 'infinity')
              and (created_at, uuid) <= (?::timestamptz, ?::uuid)`,
          [mark.createdAt, mark.uuid],
        );
      return { deleted, full: bound !== undefined };
    });
    if (step === null) return { ...result, skipped: true };
    result.rowsDeleted += step.value.deleted;
    if (step.value.deleted > 0) result.statements++;
    more = step.value.full;
  }
  return result;
}
