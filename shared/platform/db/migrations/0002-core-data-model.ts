import { Migration } from '@mikro-orm/migrations';

/**
 * The data every feature shares: persons and their distinct ids, events (partitioned by month),
 * event definitions, cohorts, the activity log, deletion requests and session recordings.
 */
export class Migration0002CoreDataModel extends Migration {
  override name = '0002-core-data-model';

  override up(): void {
    this.addSql(`
      create table person (
        id bigserial primary key,
        uuid uuid not null,
        project_id integer not null references project(id) on delete cascade,
        properties jsonb not null default '{}',
        is_identified boolean not null default false,
        created_at timestamptz not null default now(),
        version bigint not null default 0,
        unique (project_id, uuid)
      )`);
    // Newest-first listing with a stable tie-break; property filters; email exact match and search.
    this.addSql(`create index person_project_created_idx on person (project_id, created_at desc, id desc)`);
    this.addSql(`create index person_properties_gin on person using gin (properties jsonb_path_ops)`);
    this.addSql(`create index person_email_idx on person (project_id, (properties->>'email'))`);
    this.addSql(`create index person_email_trgm on person using gin ((properties->>'email') gin_trgm_ops)`);

    this.addSql(`
      create table person_distinct_id (
        id bigserial primary key,
        project_id integer not null references project(id) on delete cascade,
        person_id bigint not null references person(id) on delete cascade,
        distinct_id varchar(400) not null,
        version bigint not null default 0,
        unique (project_id, distinct_id)
      )`);
    this.addSql(`create index person_distinct_id_person_idx on person_distinct_id (person_id, id)`);

    // Events reference the person by uuid (as PostHog does), so a deleted person's events can still be found.
    // Monthly range partitions keep deletes and scans bounded; the default partition catches any timestamp.
    this.addSql(`
      create table event (
        uuid uuid not null,
        project_id integer not null,
        event varchar(400) not null,
        distinct_id varchar(400) not null,
        person_id uuid,
        properties jsonb not null default '{}',
        timestamp timestamptz not null,
        created_at timestamptz not null default now()
      ) partition by range (timestamp)`);
    this.addSql(`create table event_default partition of event default`);
    this.addSql(`create unique index event_uuid_idx on event (uuid, timestamp)`);
    this.addSql(`create index event_person_idx on event (project_id, person_id, timestamp)`);
    this.addSql(`create index event_name_idx on event (project_id, event, timestamp)`);

    this.addSql(`
      create table event_definition (
        id uuid primary key,
        project_id integer not null references project(id) on delete cascade,
        name varchar(400) not null,
        created_at timestamptz not null default now(),
        last_seen_at timestamptz,
        unique (project_id, name)
      )`);
    this.addSql(`create index event_definition_name_trgm on event_definition using gin (name gin_trgm_ops)`);

    this.addSql(`
      create table cohort (
        id serial primary key,
        project_id integer not null references project(id) on delete cascade,
        name varchar(400),
        description varchar(1000) not null default '',
        filters jsonb,
        query jsonb,
        is_static boolean not null default false,
        deleted boolean not null default false,
        is_calculating boolean not null default false,
        last_calculation timestamptz,
        count integer,
        version integer,
        created_by_id integer references app_user(id) on delete set null,
        created_at timestamptz not null default now()
      )`);
    this.addSql(`create index cohort_project_idx on cohort (project_id)`);
    this.addSql(`
      create table cohort_person (
        cohort_id integer not null references cohort(id) on delete cascade,
        person_id bigint not null references person(id) on delete cascade,
        version integer,
        primary key (cohort_id, person_id)
      )`);
    this.addSql(`create index cohort_person_person_idx on cohort_person (person_id)`);

    this.addSql(`
      create table activity_log (
        id uuid primary key,
        project_id integer,
        organization_id uuid,
        user_id integer references app_user(id) on delete set null,
        is_system boolean not null default false,
        scope varchar(79) not null,
        item_id varchar(72),
        activity varchar(79) not null,
        detail jsonb,
        created_at timestamptz not null default now()
      )`);
    this.addSql(`create index activity_log_scope_idx on activity_log (project_id, scope, item_id, created_at desc)`);

    // One row per deletion request, written in the same transaction as the API change; the worker
    // queue only carries its id. `cutoff` bounds the deletion to data that existed when it was asked for.
    this.addSql(`
      create table async_deletion (
        id bigserial primary key,
        project_id integer not null,
        deletion_type varchar(40) not null,
        key varchar(400) not null,
        mode varchar(20) not null,
        distinct_ids text[],
        created_by_id integer references app_user(id) on delete set null,
        created_at timestamptz not null default now(),
        cutoff timestamptz not null default now(),
        status varchar(20) not null default 'pending',
        attempts integer not null default 0,
        rows_deleted bigint not null default 0,
        last_error text,
        started_at timestamptz,
        delete_verified_at timestamptz
      )`);
    // Re-requesting a pending deletion is a no-op (insert … on conflict do nothing).
    this.addSql(
      `create unique index async_deletion_unique_pending on async_deletion (project_id, deletion_type, key) where delete_verified_at is null`,
    );
    this.addSql(
      `create index async_deletion_pending_idx on async_deletion (mode, created_at) where delete_verified_at is null`,
    );
    this.addSql(`create index async_deletion_project_idx on async_deletion (project_id, created_at desc)`);

    this.addSql(`
      create table session_recording (
        id bigserial primary key,
        project_id integer not null references project(id) on delete cascade,
        session_id varchar(200) not null,
        distinct_id varchar(400) not null,
        person_id uuid,
        start_time timestamptz not null,
        end_time timestamptz not null,
        snapshot_count integer not null default 0,
        created_at timestamptz not null default now(),
        unique (project_id, session_id)
      )`);
    this.addSql(`create index session_recording_person_idx on session_recording (project_id, person_id)`);
    this.addSql(`create index session_recording_distinct_idx on session_recording (project_id, distinct_id)`);
    this.addSql(`
      create table session_recording_snapshot (
        id bigserial primary key,
        project_id integer not null,
        session_id varchar(200) not null,
        timestamp timestamptz not null,
        data jsonb not null,
        created_at timestamptz not null default now()
      )`);
    this.addSql(
      `create index session_recording_snapshot_session_idx on session_recording_snapshot (project_id, session_id, timestamp)`,
    );
  }
}
