import { Migration } from '@mikro-orm/migrations';

/**
 * The index the daily experiment run reads distinct ids that got a person since its last run through
 * (0052) is led by updated_at instead of project_id. Led by project_id, it competed with the unique
 * (project_id, distinct_id) index for ingestion's lookup of each event's person: for a project newer
 * than the table's statistics both looked equally cheap, and when the planner took this one every
 * lookup read the whole project's distinct ids (ingestion into a new project slowed as it grew, until
 * the table was analyzed). An index whose first column the lookup does not constrain is never a
 * candidate for it; the daily run's range (updated_at since its last run) is its leading column.
 */
export class Migration0054DistinctIdMovedIndex extends Migration {
  override name = '0054-distinct-id-moved-index';

  override up(): void {
    this.addSql(`drop index person_distinct_id_project_updated_idx`);
    this.addSql(`create index person_distinct_id_updated_idx on person_distinct_id (updated_at, project_id)`);
  }
}
