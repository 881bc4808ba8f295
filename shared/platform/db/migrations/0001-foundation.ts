import { Migration } from '@mikro-orm/migrations';

export class Migration0001Foundation extends Migration {
  override name = '0001-foundation';

  override up(): void {
    this.addSql(`create extension if not exists pg_trgm`);
    this.addSql(`
      create table organization (
        id uuid primary key,
        name varchar(64) not null,
        created_at timestamptz not null default now(),
        updated_at timestamptz not null default now()
      )`);
    this.addSql(`
      create table app_user (
        id serial primary key,
        uuid uuid not null unique,
        distinct_id varchar(200) not null unique,
        first_name varchar(150) not null default '',
        last_name varchar(150) not null default '',
        email varchar(254) not null unique,
        is_email_verified boolean,
        is_active boolean not null default true,
        hedgehog_config jsonb,
        role_at_organization varchar(64),
        current_project_id integer,
        current_organization_id uuid references organization(id) on delete set null,
        created_at timestamptz not null default now()
      )`);
    this.addSql(`
      create table organization_membership (
        id serial primary key,
        organization_id uuid not null references organization(id) on delete cascade,
        user_id integer not null references app_user(id) on delete cascade,
        level smallint not null default 1,
        joined_at timestamptz not null default now(),
        unique (organization_id, user_id)
      )`);
    this.addSql(`create index organization_membership_user_idx on organization_membership (user_id)`);
    this.addSql(`
      create table project (
        id serial primary key,
        uuid uuid not null unique,
        organization_id uuid not null references organization(id) on delete cascade,
        name varchar(200) not null,
        api_token varchar(200) not null unique,
        timezone varchar(240) not null default 'UTC',
        completed_snippet_onboarding boolean not null default false,
        ingested_event boolean not null default false,
        is_demo boolean not null default false,
        created_at timestamptz not null default now(),
        updated_at timestamptz not null default now()
      )`);
    this.addSql(`create index project_organization_idx on project (organization_id)`);
    this.addSql(
      `alter table app_user add constraint app_user_current_project_fk foreign key (current_project_id) references project(id) on delete set null`,
    );
    this.addSql(`
      create table personal_api_key (
        id varchar(50) primary key,
        user_id integer not null references app_user(id) on delete cascade,
        label varchar(40) not null,
        mask_value varchar(11),
        secure_value varchar(300) not null unique,
        scopes text[],
        scoped_teams integer[],
        scoped_organizations text[],
        created_at timestamptz not null default now(),
        last_used_at timestamptz,
        last_rolled_at timestamptz
      )`);
    this.addSql(`create index personal_api_key_user_idx on personal_api_key (user_id)`);
  }
}
