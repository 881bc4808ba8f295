import { Migration } from '@mikro-orm/migrations';

/**
 * property_timestamp: a person property's text read as an instant, or null, the same for every session:
 * zone-less text is UTC and dates are read ISO, MDY whatever the server's or session's settings, and the
 * words PostgreSQL reads relative to the clock (now, today, tomorrow, yesterday) are not dates. So it is
 * immutable, and an index on a date property (`npm run manage -- property index --kind date`) can serve
 * is_date_before / is_date_after / is_date_exact. try_timestamptz read zone-less text in the session's
 * zone (UTC on the servers this runs on) and "now" as the time of the query.
 * Parallel unsafe: its exception block is a subtransaction, which a parallel worker (a parallel index
 * build, say) may not start.
 */
export class Migration0043PropertyTimestamp extends Migration {
  override name = '0043-property-timestamp';

  override up(): void {
    this.addSql(`
      create function property_timestamp(value text) returns timestamptz
      language plpgsql immutable parallel unsafe
      set timezone = 'UTC' set datestyle = 'ISO, MDY' set timezone_abbreviations = 'Default' as $$
      begin
        if value ~* '\\m(now|today|tomorrow|yesterday)\\M' then return null; end if;
        return value::timestamptz;
      exception when others then
        return null;
      end $$`);
  }
}
