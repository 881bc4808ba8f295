import { Migration } from '@mikro-orm/migrations';

/**
 * Deletion requests that always take effect.
 * - Only a *pending* request (not yet claimed by a worker) takes in a repeated one: its cutoff moves
 *   to the new request and the distinct ids are united. A request made while another is running,
 *   failed or completed gets a row of its own; before, it was merged into any unverified row, which
 *   kept the old cutoff, so events captured between the two requests were never deleted. The mode is
 *   part of the key: an off-peak and a weekly request of one person are two rows, each in its window.
 * - failures / next_attempt_at: a request whose job failed finally is tried again at next_attempt_at
 *   (the delay doubles per failure, up to a maximum); before, `failed` was final.
 */
export class Migration0020DeletionRetries extends Migration {
  override name = '0020-deletion-retries';

  override up(): void {
    this.addSql(`drop index async_deletion_unique_pending`);
    this.addSql(
      `create unique index async_deletion_one_pending on async_deletion (project_id, deletion_type, key, mode) where status = 'pending'`,
    );
    this.addSql(
      `alter table async_deletion add column failures integer not null default 0, add column next_attempt_at timestamptz`,
    );
    this.addSql(`create index async_deletion_retry_idx on async_deletion (next_attempt_at) where status = 'failed'`);
  }
}
