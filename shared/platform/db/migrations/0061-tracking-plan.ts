import { Migration } from '@mikro-orm/migrations';

/**
 * Tracking plans (shared/tracking-plan/): each PUT of a project's plan is a new row of
 * tracking_plan_version (the newest is in force), kept with who made it and when. Capture holds the
 * events a plan quarantines in quarantined_event (one row per project and event uuid, so an SDK's retry
 * holds nothing twice), kept QUARANTINE_RETENTION_DAYS, until a replay stores them (the row is deleted
 * in the transaction that stores the event: each is stored once). plan_violation_count counts
 * violations per event name, plan version and kind. A new version (or a project's versions deleted)
 * notifies `tracking_plan_changed` with the project id; each API process LISTENs and drops that
 * project's compiled plan (api/tracking-plan/cache.ts).
 */
export class Migration0061TrackingPlan extends Migration {
  override name = '0061-tracking-plan';

  override up(): void {
    this.addSql(`create table tracking_plan_version (
      id bigserial primary key,
      project_id integer not null references project(id) on delete cascade,
      version integer not null,
      document jsonb not null,
      created_by_id integer references app_user(id) on delete set null,
      created_at timestamptz not null default now()
    )`);
    this.addSql(
      `alter table tracking_plan_version add constraint tracking_plan_version_project_version_idx unique (project_id, version)`,
    );
    this.addSql(`create table quarantined_event (
      id bigserial primary key,
      project_id integer not null references project(id) on delete cascade,
      uuid uuid not null,
      event varchar(400) not null,
      distinct_id varchar(400) not null,
      properties jsonb not null,
      timestamp timestamptz not null,
      violations jsonb not null,
      plan_version integer not null,
      quarantined_at timestamptz not null default now()
    )`);
    this.addSql(
      `alter table quarantined_event add constraint quarantined_event_project_uuid_idx unique (project_id, uuid)`,
    );
    this.addSql(
      `create index quarantined_event_project_event_idx on quarantined_event (project_id, event, quarantined_at)`,
    );
    this.addSql(`create index quarantined_event_time_idx on quarantined_event (quarantined_at)`);
    this.addSql(`create table plan_violation_count (
      project_id integer not null references project(id) on delete cascade,
      event varchar(400) not null,
      plan_version integer not null,
      kind varchar(100) not null,
      count bigint not null default 0,
      last_seen_at timestamptz not null default now(),
      primary key (project_id, event, plan_version, kind)
    )`);
    this.addSql(`
      create function notify_tracking_plan_changed() returns trigger language plpgsql as $$
      begin
        if tg_op = 'TRUNCATE' then
          perform pg_notify('tracking_plan_changed', '*');
        elsif tg_op = 'DELETE' then
          perform pg_notify('tracking_plan_changed', old.project_id::text);
        else
          perform pg_notify('tracking_plan_changed', new.project_id::text);
          if tg_op = 'UPDATE' and new.project_id is distinct from old.project_id then
            perform pg_notify('tracking_plan_changed', old.project_id::text);
          end if;
        end if;
        return null;
      end $$`);
    this.addSql(`create trigger tracking_plan_version_changed after insert or delete or update on tracking_plan_version
      for each row execute function notify_tracking_plan_changed()`);
    this.addSql(`create trigger tracking_plan_version_truncated after truncate on tracking_plan_version
      for each statement execute function notify_tracking_plan_changed()`);
  }
}
