import { Migration } from '@mikro-orm/migrations';

/**
 * Adaptive allocation (multi-armed bandits, shared/experiments/bandit.ts):
 * - experiment_bandit: per bandit experiment, the worker's last run (probabilities, weights, the
 *   period-weighted estimate) and the history of reallocations (when, weights before and after),
 *   whose times bound the periods the estimate is stratified by.
 * - feature_flag_sticky_variant: the variant a bucketing value (distinct id, or the hash key kept for
 *   experience continuity) was first served by a flag whose experiment allocates adaptively, so it
 *   keeps it when the rollout percentages move (shared/flags/). Rows go with their flag or project;
 *   (project_id, bucketing_value) serves a person's deletion by distinct id.
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
    const args = `'project_id', 'parameters,deleted,feature_flag_id'`;
    this.addSql(`create trigger experiment_flags_update after update on experiment
      referencing old table as old_rows new table as new_rows
      for each statement execute function notify_flag_definitions_changed(${args})`);
    this.addSql(`create trigger experiment_flags_insert after insert on experiment
      referencing new table as new_rows
      for each statement execute function notify_flag_definitions_changed('project_id')`);
  }
}
