import { Migration } from '@mikro-orm/migrations';

/**
 * ClickHouse's person_distinct_id mirror also carries each person's created_at (shared/events/
 * clickhouse-mirror.ts), so a lifecycle day is decided by one ClickHouse statement. A person's
 * created_at changes when another person merges into it (the older creation wins): a row trigger,
 * only on rows whose created_at changed, writes that person's distinct ids to the outbox
 * (`person_distinct_id_change`, migration 0051) once a shipment exists. Ingestion's person writes
 * set created_at on every update, so the trigger's condition, not its column list, keeps it quiet.
 * Every shipment mirrors whole once more, to fill the new column in for the mappings already mirrored.
 */
export class Migration0064PersonCreatedMirror extends Migration {
  override name = '0064-person-created-mirror';

  override up(): void {
    this.addSql(`create function person_created_at_changed() returns trigger language plpgsql as $$
      begin
        if exists (select 1 from event_shipment) then
          insert into person_distinct_id_change (project_id, distinct_id)
            select d.project_id, d.distinct_id from person_distinct_id d
             where d.project_id = new.project_id and d.person_id = new.id;
        end if;
        return null;
      end $$`);
    this.addSql(`create trigger person_created_at_shipping after update of created_at on person
      for each row when (old.created_at is distinct from new.created_at)
      execute function person_created_at_changed()`);
    this.addSql(`update event_shipment set distinct_ids_mirrored = false`);
  }
}
