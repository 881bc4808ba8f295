import { Migration } from '@mikro-orm/migrations';

/**
 * Deletion receipts (shared/deletions/receipts.ts).
 * - async_deletion.receipt_basis: what a receipt needs that the request row does not otherwise hold,
 *   written before anything is deleted: the requester's key, and each store's rows found before
 *   (persons, distinct ids, cohort memberships and flag overrides by the API in the transaction that
 *   deletes the person; events or recordings by the worker when it claims the request).
 * - deletion_receipt: one signed receipt per verified request, written in the transaction that marks
 *   it completed. No foreign keys: a receipt outlives the person, the request row and the signing key's
 *   private half.
 * - deletion_receipt_key: every public key that ever signed (old receipts still verify after a
 *   rotation), and the private key of a generated one (when DELETION_RECEIPT_PRIVATE_KEY is unset).
 */
export class Migration0047DeletionReceipts extends Migration {
  override name = '0047-deletion-receipts';

  override up(): void {
    this.addSql(`alter table async_deletion add column receipt_basis jsonb`);
    this.addSql(`create table deletion_receipt_key (
      id varchar(64) primary key,
      public_key text not null,
      private_key text,
      created_at timestamptz not null default now(),
      retired_at timestamptz
    )`);
    this.addSql(`create table deletion_receipt (
      id bigserial primary key,
      request_id bigint not null,
      project_id integer not null,
      body jsonb not null,
      signature text not null,
      key_id varchar(64) not null,
      created_at timestamptz not null default now(),
      constraint deletion_receipt_request_id_unique unique (request_id)
    )`);
    this.addSql(
      `create index deletion_receipt_project_idx on deletion_receipt (project_id, created_at desc, request_id desc)`,
    );
  }
}
