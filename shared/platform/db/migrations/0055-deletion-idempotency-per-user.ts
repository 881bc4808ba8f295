import { Migration } from '@mikro-orm/migrations';

/**
 * Idempotency keys of deletion work are per user as well as per project and key: two users of one
 * project who happen to send the same Idempotency-Key make two requests, each attributed to its
 * user (with a key per project only, the second was answered the first user's answer). A kept row
 * cannot say whose it was, so the keys kept now (24 hours at most) are dropped: a retry of a request
 * made before this migration makes the request again, which for a pending deletion joins its row.
 */
export class Migration0055DeletionIdempotencyPerUser extends Migration {
  override name = '0055-deletion-idempotency-per-user';

  override up(): void {
    this.addSql(`delete from deletion_idempotency_key`);
    this.addSql(`alter table deletion_idempotency_key
      add column user_id integer not null references app_user(id) on delete cascade,
      drop constraint deletion_idempotency_key_pkey,
      add primary key (project_id, user_id, key)`);
  }
}
