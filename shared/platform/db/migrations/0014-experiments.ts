import { Migration } from '@mikro-orm/migrations';

/** Feature flags, experiments, holdouts, saved metrics and their links, and computed metric results. */
export class Migration0014Experiments extends Migration {
  override name = '0014-experiments';

  override up(): void {
    this.addSql(`
      create table feature_flag (
        id serial primary key,
        project_id integer not null references project(id) on delete cascade,
        key varchar(400) not null,
        name text not null default '',
        filters jsonb not null default '{}',
        active boolean not null default true,
        deleted boolean not null default false,
        ensure_experience_continuity boolean not null default false,
        has_encrypted_payloads boolean not null default false,
        version integer not null default 1,
        evaluation_runtime varchar(10) not null default 'all',
        evaluation_tags text[] not null default '{}',
        created_by_id integer references app_user(id) on delete set null,
        created_at timestamptz not null default now(),
        updated_at timestamptz not null default now()
      )`);
    this.addSql(`create unique index feature_flag_project_key_idx on feature_flag (project_id, key) where not deleted`);
    this.addSql(`
      create table experiment_holdout (
        id serial primary key,
        project_id integer not null references project(id) on delete cascade,
        name varchar(400) not null,
        description varchar(400),
        filters jsonb not null default '[]',
        created_by_id integer references app_user(id) on delete set null,
        created_at timestamptz not null default now(),
        updated_at timestamptz not null default now()
      )`);
    this.addSql(`
      create table experiment_saved_metric (
        id serial primary key,
        project_id integer not null references project(id) on delete cascade,
        name varchar(400) not null,
        description varchar(400),
        query jsonb not null,
        tags text[] not null default '{}',
        created_by_id integer references app_user(id) on delete set null,
        created_at timestamptz not null default now(),
        updated_at timestamptz not null default now()
      )`);
    this.addSql(`
      create table experiment (
        id serial primary key,
        project_id integer not null references project(id) on delete cascade,
        name varchar(400) not null,
        description text,
        filters jsonb not null default '{}',
        parameters jsonb,
        secondary_metrics jsonb not null default '[]',
        created_by_id integer references app_user(id) on delete set null,
        feature_flag_id integer not null references feature_flag(id),
        exposure_cohort_id integer references cohort(id) on delete set null,
        holdout_id integer references experiment_holdout(id) on delete set null,
        start_date timestamptz,
        end_date timestamptz,
        created_at timestamptz not null default now(),
        updated_at timestamptz not null default now(),
        archived boolean not null default false,
        deleted boolean not null default false,
        type varchar(40) default 'product',
        exposure_criteria jsonb default '{}',
        metrics jsonb default '[]',
        metrics_secondary jsonb default '[]',
        stats_config jsonb default '{}',
        conclusion varchar(30),
        conclusion_comment text,
        primary_metrics_ordered_uuids jsonb,
        secondary_metrics_ordered_uuids jsonb,
        create_in_folder text
      )`);
    this.addSql(`create index experiment_project_idx on experiment (project_id, created_at desc) where not deleted`);
    this.addSql(`
      create table experiment_to_saved_metric (
        id serial primary key,
        experiment_id integer not null references experiment(id) on delete cascade,
        saved_metric_id integer not null references experiment_saved_metric(id) on delete cascade,
        metadata jsonb not null default '{}',
        created_at timestamptz not null default now()
      )`);
    this.addSql(`create index experiment_to_saved_metric_experiment_idx on experiment_to_saved_metric (experiment_id)`);
    this.addSql(`
      create table experiment_metric_result (
        id serial primary key,
        experiment_id integer not null references experiment(id) on delete cascade,
        metric_uuid varchar(200) not null,
        fingerprint varchar(64) not null,
        day date not null,
        status varchar(20) not null,
        result jsonb,
        error_message text,
        computed_at timestamptz,
        created_at timestamptz not null default now(),
        updated_at timestamptz not null default now(),
        unique (experiment_id, metric_uuid, fingerprint, day)
      )`);
  }
}
