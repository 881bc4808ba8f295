import { Migration } from '@mikro-orm/migrations';

/**
 * Shipping events to the ClickHouse event store (shared/events/shipper.ts). `event_shipment` holds the
 * shipped-up-to mark per target, a (created_at, uuid) position walked through an index of its own.
 * `person_distinct_id_change` is an outbox of distinct ids whose person changed (insert, merge,
 * split, delete), written by statement triggers — but only once a shipment exists, so an install on
 * PostgreSQL alone pays one lookup of an empty table per statement and keeps no outbox.
 */
export class Migration0051EventShipping extends Migration {
  override name = '0051-event-shipping';

  override up(): void {
    this.addSql(`create index if not exists event_created_idx on event (created_at, uuid)`);
    this.addSql(`create table event_shipment (
      target varchar(40) primary key,
      created_at timestamptz not null,
      uuid uuid not null,
      pending_created_at timestamptz,
      pending_uuid uuid,
      shipped bigint not null default 0,
      distinct_ids_mirrored boolean not null default false,
      updated_at timestamptz not null default now()
    )`);
    this.addSql(`create table person_distinct_id_change (
      seq bigserial primary key,
      project_id integer not null,
      distinct_id varchar(400) not null
    )`);
    this.addSql(`create function person_distinct_id_changed() returns trigger language plpgsql as $$
      begin
        if exists (select 1 from event_shipment) then
          insert into person_distinct_id_change (project_id, distinct_id)
            select distinct project_id, distinct_id from changed;
        end if;
        return null;
      end $$`);
    for (const [op, table] of [
      ['insert', 'new'],
      ['update', 'new'],
      ['delete', 'old'],
    ])
      this.addSql(`create trigger person_distinct_id_${op}_shipping after ${op} on person_distinct_id
        referencing ${table} table as changed for each statement execute function person_distinct_id_changed()`);
  }
}
