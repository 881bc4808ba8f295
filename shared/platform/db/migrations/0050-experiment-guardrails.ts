import { Migration } from '@mikro-orm/migrations';

/**
 * Guardrails (stats_config.guardrails): the worker's last check of an experiment and, once its circuit
 * breaker trips, when and why, with the flag's filters before the trip (for the reset). A column of
 * its own, written only by the check and the reset, so an update of stats_config cannot erase it.
 */
export class Migration0050ExperimentGuardrails extends Migration {
  override name = '0050-experiment-guardrails';

  override up(): void {
    this.addSql(`alter table experiment add column guardrail_status jsonb`);
  }
}
