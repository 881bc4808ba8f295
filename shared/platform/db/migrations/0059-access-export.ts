import { Migration } from '@mikro-orm/migrations';

/**
 * Access exports (shared/access-exports): one row per request for a person's data. The worker builds
 * one .tar.gz per row on disk (ACCESS_EXPORT_DIR) with a signed manifest whose SHA-256 is kept here,
 * so a later deletion receipt of the person can cite it; an expired archive's removal is recorded
 * (status expired, removed_at).
 */
export class Migration0059AccessExport extends Migration {
  override name = '0059-access-export';

  override up(): void {
    this.addSql(`create table access_export (
      id bigserial primary key,
      project_id integer not null references project(id) on delete cascade,
      created_by_id integer references app_user(id) on delete set null,
      api_key_id varchar(50),
      status varchar(20) not null default 'pending',
      person_uuids uuid[] not null,
      person_ids bigint[] not null,
      distinct_ids text[] not null,
      request jsonb not null default '{}',
      cutoff timestamptz not null default now(),
      created_at timestamptz not null default now(),
      started_at timestamptz,
      completed_at timestamptz,
      expires_at timestamptz,
      removed_at timestamptz,
      attempts integer not null default 0,
      last_error text,
      file_path text,
      size_bytes bigint,
      manifest jsonb,
      manifest_sha256 varchar(64),
      signature text,
      key_id varchar(64)
    )`);
    this.addSql(`create index access_export_project_idx on access_export (project_id, created_at desc)`);
    this.addSql(`create index access_export_uuids_idx on access_export using gin (person_uuids)`);
    this.addSql(`create index access_export_expiry_idx on access_export (expires_at) where status = 'completed'`);
    this.addSql(
      `create index access_export_pending_idx on access_export (created_at) where status in ('pending', 'running')`,
    );
  }
}
