import { Migration } from '@mikro-orm/migrations';

/**
 * A project's events by time, whatever their name: lifecycle over all events reads two days of a
 * project by a timestamp range (the other event indexes lead with the event name or distinct id).
 */
export class Migration0030EventProjectTimeIndex extends Migration {
  override name = '0030-event-project-time-index';

  override up(): void {
    this.addSql(`create index if not exists event_project_time_idx on event (project_id, timestamp)`);
  }
}
