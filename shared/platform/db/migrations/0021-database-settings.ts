import { Migration } from '@mikro-orm/migrations';

/**
 * Session settings live on the database, where every new session (direct, or a pooler's server
 * connection) picks them up: a transaction-mode pooler such as PgBouncer refuses the `options`
 * startup parameter they were sent in before. JIT compilation off: it cost 50–100 ms on statements
 * the planner thinks expensive (a thousand-key deletion check, a search over a million persons),
 * far more than it saves on ours. `ALTER DATABASE … SET jit = on` turns it back on.
 */
export class Migration0021DatabaseSettings extends Migration {
  override name = '0021-database-settings';

  override up(): void {
    this.addSql(`do $$ begin execute format('alter database %I set jit = off', current_database()); end $$`);
  }
}
