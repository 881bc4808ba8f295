import { Migration } from '@mikro-orm/migrations';

/**
 * The read-access log: one row for every API read that returned persons' data (a retrieve, a list
 * page, a CSV export, events, a timeline, an access export …), naming who read (user, API key),
 * how (action, request id, client address) and whose data (the persons' uuids). Listed per person
 * (a GIN index on the uuids) and per project by time; purged by time.
 */
export class Migration0057PersonAccessLog extends Migration {
  override name = '0057-person-access-log';

  override up(): void {
    this.addSql(`create table person_access_log (
      id bigserial primary key,
      project_id integer not null references project(id) on delete cascade,
      user_id integer references app_user(id) on delete set null,
      api_key_id varchar(50),
      action varchar(100) not null,
      person_uuids uuid[] not null,
      request_id varchar(200),
      client_address varchar(100),
      details jsonb not null default '{}',
      timestamp timestamptz not null default now()
    )`);
    this.addSql(`create index person_access_log_project_time_idx on person_access_log (project_id, timestamp desc)`);
    this.addSql(`create index person_access_log_uuids_idx on person_access_log using gin (person_uuids)`);
    this.addSql(`create index person_access_log_time_idx on person_access_log (timestamp)`);
  }
}
