import { Migration } from '@mikro-orm/migrations';

/**
 * Adaptive allocation (multi-armed bandits, shared/experiments/bandit.ts):
 * - experiment_bandit: per bandit experiment, the worker's last run (probabilities, weights, the
 *   period-weighted estimate) and the history of reallocations (when, weights before and after),
 *   whose times bound the periods the estimate is stratified by.
 * - feature_flag_sticky_variant: the variant a bucketing value (distinct id, or the hash key kept for
 *   experience continuity) was first served by a flag whose experiment allocates adaptively, so it
 *   keeps it when the rollout percentages move (shared/flags/). Rows go with their flag or project,
 *   and with a deleted person's distinct ids (a trigger on person_distinct_id, through the index on
 *   (project_id, bucketing_value)).
 * - experiment's parameters, deleted flag and flag notify `flag_definitions_changed` (migration 0023),
 *   since whether a flag is sticky follows its experiment's parameters.allocation.
 */
export class Migration0063ExperimentBandits extends Migration {
  override name = '0063-experiment-bandits';

  override up(): void {
    this.addSql(`create table experiment_bandit (
      experiment_id integer primary key references experiment (id) on delete cascade,
      checked_at timestamptz not null,
      result jsonb not null,
      history jsonb not null default '[]',
      updated_at timestamptz not null default now()
    )`);
    this.addSql(`create table feature_flag_sticky_variant (
      feature_flag_id integer not null references feature_flag (id) on delete cascade,
      bucketing_value varchar(400) not null,
      project_id integer not null references project (id) on delete cascade,
      variant varchar(400) not null,
      assigned_at timestamptz not null default now(),
      primary key (feature_flag_id, bucketing_value)
    )`);
    this.addSql(
      `create index feature_flag_sticky_variant_project_idx on feature_flag_sticky_variant (project_id, bucketing_value)`,
    );
    // A person's deletion (their distinct ids cascade) forgets the variants those ids were served.
    this.addSql(`create function forget_sticky_variants() returns trigger language plpgsql as $$
      begin
        delete from feature_flag_sticky_variant s using old_rows o
         where s.project_id = o.project_id and s.bucketing_value = o.distinct_id;
        return null;
      end $$`);
    this.addSql(`create trigger person_distinct_id_forget_sticky after delete on person_distinct_id
      referencing old table as old_rows for each statement execute function forget_sticky_variants()`);
    const args = `'project_id', 'parameters,deleted,feature_flag_id'`;
    this.addSql(`create trigger experiment_flags_update after update on experiment
      referencing old table as old_rows new table as new_rows
      for each statement execute function notify_flag_definitions_changed(${args})`);
    this.addSql(`create trigger experiment_flags_insert after insert on experiment
      referencing new table as new_rows
      for each statement execute function notify_flag_definitions_changed('project_id')`);
  }
}
