import { Migration } from '@mikro-orm/migrations';

/**
 * Data retention per project: how many days of events and of session recordings to keep (null: keep
 * forever), and one record per project and retention run of what it removed (shared/retention/).
 */
export class Migration0048Retention extends Migration {
  override name = '0048-retention';

  override up(): void {
    this.addSql(`alter table project
      add column event_retention_days integer,
      add column recording_retention_days integer,
      add constraint project_event_retention_days_check check (event_retention_days > 0),
      add constraint project_recording_retention_days_check check (recording_retention_days > 0)`);
    this.addSql(`create table retention_run (
      id bigserial primary key,
      project_id integer not null references project(id) on delete cascade,
      job_id varchar(200),
      started_at timestamptz not null,
      finished_at timestamptz not null,
      event_cutoff timestamptz,
      recording_cutoff timestamptz,
      events_deleted bigint not null default 0,
      events_in_dropped_partitions bigint not null default 0,
      partitions_dropped text[] not null default '{}',
      recordings_deleted bigint not null default 0,
      snapshots_deleted bigint not null default 0
    )`);
    this.addSql(`create index retention_run_project_idx on retention_run (project_id, started_at desc)`);
  }
}
