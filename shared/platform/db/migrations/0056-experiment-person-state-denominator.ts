import { Migration } from '@mikro-orm/migrations';

/** A ratio metric's person state keeps the denominator's running sum beside the numerator's (value). */
export class Migration0056ExperimentPersonStateDenominator extends Migration {
  override name = '0056-experiment-person-state-denominator';

  override up(): void {
    this.addSql(`alter table experiment_person_state add column denominator double precision not null default 0`);
  }
}
