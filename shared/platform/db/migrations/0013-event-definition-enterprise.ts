import { Migration } from '@mikro-orm/migrations';

/** The enterprise fields of event definitions (no licence needed here) and a per-day read counter. */
export class Migration0013EventDefinitionEnterprise extends Migration {
  override name = '0013-event-definition-enterprise';

  override up(): void {
    this.addSql(`
      alter table event_definition
        add column description text not null default '',
        add column tags text[] not null default '{}',
        add column owner_id integer references app_user(id) on delete set null,
        add column updated_at timestamptz,
        add column updated_by_id integer references app_user(id) on delete set null,
        add column verified boolean not null default false,
        add column verified_at timestamptz,
        add column verified_by_id integer references app_user(id) on delete set null,
        add column hidden boolean not null default false,
        add column default_columns text[] not null default '{}',
        add column post_to_slack boolean not null default false`);
    this.addSql(
      `create index event_definition_project_seen_idx on event_definition (project_id, ((last_seen_at at time zone 'UTC')::date) desc nulls last, name collate "C")`,
    );
    this.addSql(`
      create table event_definition_usage (
        definition_id uuid not null references event_definition(id) on delete cascade,
        day date not null,
        reads integer not null default 0,
        primary key (definition_id, day)
      )`);
  }
}
