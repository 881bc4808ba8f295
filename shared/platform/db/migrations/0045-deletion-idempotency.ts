import { Migration } from '@mikro-orm/migrations';

/**
 * Idempotency keys of the requests that create deletion work (DELETE person, delete_events,
 * delete_recordings, bulk_delete): one row per project and key, written in the same transaction as
 * the request it answers, holding a fingerprint of that request and its answer for 24 hours. The
 * shape is the entity's (shared/entities/deletion-idempotency-key.ts). A deletion request may also be
 * `cancelled` (status) while pending; its finished_at is then when it was cancelled.
 */
export class Migration0045DeletionIdempotency extends Migration {
  override name = '0045-deletion-idempotency';

  override up(): void {
    this.addSql(`create table deletion_idempotency_key (
      project_id integer not null references project(id) on delete cascade,
      key varchar(255) not null,
      fingerprint varchar(64) not null,
      response_status smallint,
      response_body jsonb,
      created_at timestamptz not null default now(),
      expires_at timestamptz not null,
      primary key (project_id, key)
    )`);
    this.addSql(`create index deletion_idempotency_key_expires_idx on deletion_idempotency_key (expires_at)`);
  }
}
