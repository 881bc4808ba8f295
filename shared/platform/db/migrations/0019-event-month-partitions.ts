import { Migration } from '@mikro-orm/migrations';

/**
 * The event table is partitioned by month of `timestamp`, but until now only its default partition
 * existed, so every event landed there. ensure_event_partitions(n) creates the partitions of this
 * month and the next n (UTC), moving any rows the default partition already holds for them. The
 * worker's maintenance queue calls it daily (worker/jobs/event-partitions.ts); events older than
 * the first partition, or far in the future, stay in the default partition.
 */
export class Migration0019EventMonthPartitions extends Migration {
  override name = '0019-event-month-partitions';

  override up(): void {
    this.addSql(`
      create function ensure_event_partitions(months_ahead int) returns setof text language plpgsql as $$
      declare
        first_month timestamptz := date_trunc('month', now() at time zone 'UTC') at time zone 'UTC';
        month_start timestamptz;
        month_end timestamptz;
        name text;
      begin
        -- One caller at a time: two workers must not both create a month.
        perform pg_advisory_xact_lock(hashtext('ensure_event_partitions'));
        for i in 0..months_ahead loop
          month_start := first_month + make_interval(months => i);
          month_end := month_start + interval '1 month';
          name := 'event_' || to_char(month_start at time zone 'UTC', '"y"YYYY"m"MM');
          continue when to_regclass(name) is not null;
          execute format('create table %I (like event including defaults)', name);
          execute format('insert into %I select * from event_default where timestamp >= %L and timestamp < %L', name, month_start, month_end);
          execute format('delete from event_default where timestamp >= %L and timestamp < %L', month_start, month_end);
          execute format('alter table event attach partition %I for values from (%L) to (%L)', name, month_start, month_end);
          return next name;
        end loop;
      end $$`);
    this.addSql(`select ensure_event_partitions(2)`);
  }
}
