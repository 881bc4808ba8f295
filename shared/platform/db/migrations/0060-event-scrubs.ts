import { Migration } from '@mikro-orm/migrations';

/**
 * Scrubs by content (shared/scrubs): one row per request to delete, or strip properties from, the
 * events matching a filter (target 'events'), or to delete the recordings of distinct ids in a time
 * range (target 'recordings'); bounded by its cutoff (what had arrived when it was asked), run at
 * `run_after` (now, or the off-peak window), with its counts before and after per store and its
 * signed receipt.
 */
export class Migration0060EventScrubs extends Migration {
  override name = '0060-event-scrubs';

  override up(): void {
    this.addSql(`create table event_scrub (
      id bigserial primary key,
      project_id integer not null references project(id) on delete cascade,
      target varchar(20) not null,
      action varchar(30) not null,
      mode varchar(20) not null,
      filter jsonb not null,
      status varchar(20) not null default 'pending',
      cutoff timestamptz not null default now(),
      run_after timestamptz not null default now(),
      created_at timestamptz not null default now(),
      created_by_id integer references app_user(id) on delete set null,
      attempts integer not null default 0,
      lease_until timestamptz,
      started_at timestamptz,
      completed_at timestamptz,
      cancelled_at timestamptz,
      last_error text,
      counts_before jsonb,
      counts_after jsonb,
      rows_changed jsonb,
      receipt jsonb,
      receipt_signature text,
      receipt_key_id varchar(50)
    )`);
    this.addSql(`create index event_scrub_project_idx on event_scrub (project_id, id)`);
    this.addSql(`create index event_scrub_due_idx on event_scrub (run_after) where status in ('pending', 'running')`);
  }
}
