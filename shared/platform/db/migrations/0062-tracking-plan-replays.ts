import { Migration } from '@mikro-orm/migrations';

/**
 * One row per quarantine replay (POST …/tracking_plan/quarantine/replay/ without dry_run): what it
 * selects, who asked, and what it did. A small replay runs in the request; a large one in the worker
 * (job `replay-quarantine`, by this row's id), which counts here as it goes.
 */
export class Migration0062TrackingPlanReplays extends Migration {
  override name = '0062-tracking-plan-replays';

  override up(): void {
    this.addSql(`create table tracking_plan_replay (
      id bigserial primary key,
      project_id integer not null references project(id) on delete cascade,
      filter jsonb not null default '{}',
      requested_by_id integer references app_user(id) on delete set null,
      created_at timestamptz not null default now(),
      status varchar(20) not null default 'queued',
      selected bigint not null default 0,
      stored bigint not null default 0,
      still_violating bigint not null default 0,
      dropped bigint not null default 0,
      finished_at timestamptz,
      last_error text
    )`);
    this.addSql(`create index tracking_plan_replay_project_idx on tracking_plan_replay (project_id, created_at desc)`);
  }
}
