import { Migration } from '@mikro-orm/migrations';

/**
 * Incremental experiment results (shared/experiments/results.ts): per experiment metric and exposed
 * person, what adding the next events needs without reading their history (variant, first exposure,
 * exposure to a second variant, the running value or the funnel steps reached, CUPED's covariate),
 * as of the end of the day `experiment_metric_state.day` says; both are rewritten in the transaction
 * that stores the metric's days.
 *
 * `person_distinct_id.updated_at`: when a distinct id got its current person (inserted, or moved by a
 * merge or a split), so the daily run sees that earlier events now count for another person.
 * The default is evaluated once for the existing rows (no table rewrite).
 */
export class Migration0052ExperimentPersonState extends Migration {
  override name = '0052-experiment-person-state';

  override up(): void {
    this.addSql(`create table experiment_metric_state (
      experiment_id integer not null references experiment (id) on delete cascade,
      metric_uuid varchar(200) not null,
      fingerprint varchar(64) not null,
      day date not null,
      updated_at timestamptz not null default now(),
      primary key (experiment_id, metric_uuid)
    )`);
    this.addSql(`create table experiment_person_state (
      experiment_id integer not null references experiment (id) on delete cascade,
      metric_uuid varchar(200) not null,
      person_id bigint not null,
      variant text not null,
      first_exposed_at timestamptz not null,
      left_at timestamptz,
      value double precision not null default 0,
      covariate double precision not null default 0,
      steps jsonb,
      primary key (experiment_id, metric_uuid, person_id)
    )`);
    this.addSql(`alter table person_distinct_id add column updated_at timestamptz not null default now()`);
    this.addSql(`create index person_distinct_id_project_updated_idx on person_distinct_id (project_id, updated_at)`);
    this.addSql(`create function person_distinct_id_moved() returns trigger language plpgsql as $$
      begin
        new.updated_at := now();
        return new;
      end $$`);
    this.addSql(`create trigger person_distinct_id_moved before update of person_id on person_distinct_id
      for each row when (old.person_id is distinct from new.person_id) execute function person_distinct_id_moved()`);
  }
}
