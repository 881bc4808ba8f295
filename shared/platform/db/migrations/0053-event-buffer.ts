import { Migration } from '@mikro-orm/migrations';

/**
 * With EVENT_STORE=clickhouse PostgreSQL keeps events only for EVENT_BUFFER_HOURS once shipped
 * (shared/events/buffer.ts). `event_trim` says which events are gone from PostgreSQL's `event` and
 * held by ClickHouse alone: those whose `timestamp` is in [ts_from, ts_to) and whose (created_at, uuid)
 * is at or before the row's mark. The row (-infinity, infinity) is the trim's walk in (created_at, uuid)
 * order; a row of a month's bounds is a monthly partition emptied whole (its last row's mark), kept
 * until the walk passes it. Each mark moves in the transaction that removes its rows, so any snapshot
 * sees exactly the events PostgreSQL no longer has (what a deletion's or retention's count adds from
 * ClickHouse).
 */
export class Migration0053EventBuffer extends Migration {
  override name = '0053-event-buffer';

  override up(): void {
    this.addSql(`create table event_trim (
      ts_from timestamptz not null,
      ts_to timestamptz not null,
      created_at timestamptz not null,
      uuid uuid not null,
      updated_at timestamptz not null default now(),
      primary key (ts_from, ts_to)
    )`);
  }
}
