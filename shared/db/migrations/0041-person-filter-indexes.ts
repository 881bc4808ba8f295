import { Migration } from '@mikro-orm/migrations';

/**
 * Person property filters at scale. is_set: a GIN on (project_id, top-level keys), as jsonb_path_ops
 * cannot answer "has key" (a key nobody has was a scan of the project). try_numeric becomes an
 * inlinable SQL function that casts only what looks like a number: a plpgsql exception block per row
 * made gt/lt scans several times slower. What it returns is unchanged (ASCII digits and spaces, as
 * numeric input reads them; at most 1000 characters and a 4-digit exponent, within numeric's range).
 */
export class Migration0041PersonFilterIndexes extends Migration {
  override name = '0041-person-filter-indexes';

  override up(): void {
    this.addSql(`
      create or replace function jsonb_top_keys(value jsonb) returns text[] language sql immutable parallel safe as $$
        select coalesce(array_agg(k), '{}') from jsonb_object_keys(value) k
      $$`);
    this.addSql(
      `create index person_keys_gin on person using gin (project_id, jsonb_top_keys(properties)) with (gin_pending_list_limit = 256)`,
    );
    this.addSql(`
      create or replace function try_numeric(value text) returns numeric language sql immutable parallel safe as $$
        select case
          when length(value) <= 1000
            and value ~ '^[ \t\n\r\v\f]*[-+]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][-+]?[0-9]{1,4})?[ \t\n\r\v\f]*$'
            then value::numeric
          when value ~* '^[ \t\n\r\v\f]*[-+]?(nan|inf|infinity)[ \t\n\r\v\f]*$' then value::numeric
        end
      $$`);
  }
}
