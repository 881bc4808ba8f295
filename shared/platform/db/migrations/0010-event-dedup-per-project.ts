import { Migration } from '@mikro-orm/migrations';

/** Deduplicate event uuids per project: one project's uuid must never suppress another project's event. */
export class Migration0010EventDedupPerProject extends Migration {
  override name = '0010-event-dedup-per-project';

  override up(): void {
    this.addSql(`drop index if exists event_uuid_idx`);
    this.addSql(`create unique index event_project_uuid_idx on event (project_id, uuid, timestamp)`);
  }
}
