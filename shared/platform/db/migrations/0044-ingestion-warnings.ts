import { Migration } from '@mikro-orm/migrations';

/**
 * PostHog's ingestion warnings: one row for every event capture answered 200 for but dropped or stored
 * altered (nested too deep, timestamp replaced, merge refused …), kept 30 days (the daily maintenance job
 * purges older rows). Listed by project and type, newest first; the purge scans by time alone.
 */
export class Migration0044IngestionWarnings extends Migration {
  override name = '0044-ingestion-warnings';

  override up(): void {
    this.addSql(`create table ingestion_warning (
      id bigserial primary key,
      project_id integer not null references project(id) on delete cascade,
      type varchar(100) not null,
      event_uuid uuid,
      distinct_id varchar(400),
      details jsonb not null default '{}',
      timestamp timestamptz not null default now()
    )`);
    this.addSql(
      `create index ingestion_warning_project_type_time_idx on ingestion_warning (project_id, type, timestamp desc)`,
    );
    this.addSql(`create index ingestion_warning_time_idx on ingestion_warning (timestamp)`);
  }
}
