import { Migration } from '@mikro-orm/migrations';

/**
 * released_at: when a scheduled (weekly / off-peak) request was handed to the worker by its batch.
 * lease_until: a running request's claim; a worker renews it per chunk, so a crashed worker's
 * request can be claimed by another once the lease runs out.
 */
export class Migration0012DeletionScheduling extends Migration {
  override name = '0012-deletion-scheduling';

  override up(): void {
    this.addSql(
      `alter table async_deletion add column released_at timestamptz, add column lease_until timestamptz, add column finished_at timestamptz`,
    );
  }
}
