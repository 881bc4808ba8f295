import { Migration } from '@mikro-orm/migrations';

/**
 * claimed_by: the request whose job is processing this one. A job deletes the events of up to
 * DELETION_BATCH_SIZE released requests of its project in one pass; the others' own jobs see the
 * claim and step aside instead of waiting on it.
 * fillfactor 50: every chunk updates the progress of up to 1000 rows; room on the page makes those
 * updates HOT (no index writes), about five times cheaper.
 */
export class Migration0016DeletionBatches extends Migration {
  override name = '0016-deletion-batches';

  override up(): void {
    this.addSql(`alter table async_deletion add column claimed_by bigint`);
    this.addSql(`alter table async_deletion set (fillfactor = 50)`);
  }
}
