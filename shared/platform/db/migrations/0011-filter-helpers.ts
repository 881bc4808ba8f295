import { Migration } from '@mikro-orm/migrations';

/**
 * Safe casts for property filters (a property holding "abc" compared with gt 5 is simply not a
 * match, never an error), and the index that finds a person's events by distinct id.
 */
export class Migration0011FilterHelpers extends Migration {
  override name = '0011-filter-helpers';

  override up(): void {
    this.addSql(`
      create or replace function try_numeric(value text) returns numeric language plpgsql immutable as $$
      begin
        return value::numeric;
      exception when others then
        return null;
      end $$`);
    this.addSql(`
      create or replace function try_timestamptz(value text) returns timestamptz language plpgsql stable as $$
      begin
        return value::timestamptz;
      exception when others then
        return null;
      end $$`);
    this.addSql(`
      create or replace function regex_matches(value text, pattern text) returns boolean language plpgsql immutable as $$
      begin
        return value ~ pattern;
      exception when others then
        return null;
      end $$`);
    this.addSql(`create index event_distinct_id_idx on event (project_id, distinct_id, timestamp)`);
  }
}
