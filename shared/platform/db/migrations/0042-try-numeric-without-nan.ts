import { Migration } from '@mikro-orm/migrations';

/**
 * try_numeric no longer reads "NaN": PostgreSQL orders numeric NaN above every number, so a property
 * holding the text "NaN" passed every gt/gte filter, where PostHog's comparison with nan is false.
 * Infinity stays a number (it compares as PostHog's does).
 */
export class Migration0042TryNumericWithoutNan extends Migration {
  override name = '0042-try-numeric-without-nan';

  override up(): void {
    this.addSql(`
      create or replace function try_numeric(value text) returns numeric language sql immutable parallel safe as $$
        select case
          when length(value) <= 1000
            and value ~ '^[ \t\n\r\v\f]*[-+]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][-+]?[0-9]{1,4})?[ \t\n\r\v\f]*$'
            then value::numeric
          when value ~* '^[ \t\n\r\v\f]*[-+]?(inf|infinity)[ \t\n\r\v\f]*$' then value::numeric
        end
      $$`);
  }
}
