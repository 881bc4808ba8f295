import { Migration } from '@mikro-orm/migrations';

/**
 * try_numeric (gt/lt/between filters) becomes an inlinable SQL function that casts only what looks like
 * a number: a plpgsql exception block per row made a scan slower. What it returns is unchanged (ASCII
 * digits and spaces, as numeric input reads them; at most 1000 characters and a 4-digit exponent).
 */
export class Migration0041TryNumericWithoutException extends Migration {
  override name = '0041-try-numeric-without-exception';

  override up(): void {
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
