// Percentile metrics with EVENT_STORE=clickhouse (chDB): the results job reads the events from
// ClickHouse (grouped by distinct id in the engine, as the other metrics' reads) and the persons from
// PostgreSQL, and every stored day equals the computation on PostgreSQL's copy of the same events,
// exactly; a person exposed to both variants, and events before the exposure, count nowhere.
import type { Job } from 'bullmq';
import type { EntityManager, MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ClickHouseEventStore } from '../../../shared/events/clickhouse.ts';
import type { EventStore } from '../../../shared/events/event-store.ts';
import { shipEvents } from '../../../shared/events/shipper.ts';
import { createExperiment } from '../../../shared/experiments/service.ts';
import { experimentForResults } from '../../../shared/experiments/results.ts';
import { computePercentileSeries } from '../../../shared/experiments/percentile-results.ts';
import { percentileComparison } from '../../../shared/experiments/percentile.ts';
import type { JobData } from '../../../shared/platform/jobs.ts';
import { computeExperimentResults } from '../../../shared/experiments/results-job.ts';
import type { WorkerDeps } from '../../../worker/deps.ts';
import { sql } from '../../db.ts';
import { exposure, insertEvents, type Row } from '../../event-scans.ts';
import { createAccount, type TestAccount } from '../../helpers.ts';
import { clickHouseResultsWorld } from '../../experiment-days.ts';

const DAY = 86400_000;
const today = Date.UTC(new Date().getUTCFullYear(), new Date().getUTCMonth(), new Date().getUTCDate());
const at = (offset: number, minutes: number) => new Date(today + offset * DAY + minutes * 60_000);

let orm: MikroORM;
let ch: ClickHouseEventStore;
let pg: EventStore;
let deps: WorkerDeps;
let account: TestAccount;

beforeAll(async () => {
  ({ orm, ch, pg, deps } = await clickHouseResultsWorld('percentile'));
  account = await createAccount(orm);
});
afterAll(() => orm?.close());

const metrics = [
  {
    kind: 'ExperimentMetric',
    metric_type: 'percentile',
    percentile: 0.95,
    percentile_unit: 'per_event',
    source: { kind: 'EventsNode', event: 'page_load', math: 'sum', math_property: 'ms' },
  },
  {
    kind: 'ExperimentMetric',
    metric_type: 'percentile',
    percentile: 0.75,
    source: { kind: 'EventsNode', event: 'page_load', math: 'total' },
  },
];

describe('percentile metrics with the ClickHouse event store', () => {
  it('equal the computation on PostgreSQL, day by day, and the hand-built samples', async () => {
    const flag = 'ch-percentile';
    const id = await createExperiment(
      orm.em.fork() as EntityManager,
      { projectId: account.projectId, organizationId: account.organizationId, userId: account.userId },
      {
        name: flag,
        feature_flag_key: flag,
        start_date: at(-2, 0).toISOString(),
        metrics,
        stats_config: { method: 'bayesian' },
      },
    );
    const rows: Row[] = [];
    // Day −2: persons 0–79; day −1: persons 80–139 (the first day's result has the first ones only).
    const loads: Record<string, Record<number, { values: number[]; clusters: number[]; counts: number[] }>> = {};
    for (let i = 0; i < 140; i++) {
      const person = `p${i}`;
      const variant = i % 2 ? 'test' : 'control';
      const day = i < 80 ? -2 : -1;
      rows.push(exposure(flag, person, variant, at(day, 60 + i), `${person}-anon`));
      rows.push({ person, distinctId: person, event: 'page_load', at: at(day, 30), properties: { ms: 1e6 } }); // before exposure
      const n = i % 5;
      for (let k = 0; k < n; k++) {
        const ms = 100 + ((i * 53 + k * 29) % 400) * (variant === 'test' ? 1.2 : 1);
        rows.push({ person, distinctId: person, event: 'page_load', at: at(day, 300 + i + k), properties: { ms } });
        for (const d of day === -2 ? [0, 1] : [1]) {
          loads[variant] ??= {};
          loads[variant][d] ??= { values: [], clusters: [], counts: [] };
          loads[variant][d].values.push(ms);
          loads[variant][d].clusters.push(i);
        }
      }
      for (const d of day === -2 ? [0, 1] : [1]) {
        loads[variant] ??= {};
        loads[variant][d] ??= { values: [], clusters: [], counts: [] };
        loads[variant][d].counts.push(n);
      }
    }
    // In both variants: counts nowhere.
    rows.push(exposure(flag, 'both', 'control', at(-2, 10)));
    rows.push(exposure(flag, 'both', 'test', at(-2, 20)));
    rows.push({ person: 'both', distinctId: 'both', event: 'page_load', at: at(-2, 30), properties: { ms: 5e6 } });
    await insertEvents(orm, account.projectId, rows);
    await shipEvents(orm, ch, { batchSize: 500, settleSeconds: 0 });

    const now = at(0, 60);
    await computeExperimentResults({ data: { experimentId: id } } as Job<JobData['experimentResults']>, deps, now);
    const [row] = await sql(
      orm,
      `select x.*, f.key as flag_key, f.filters as flag_filters from experiment x join feature_flag f on f.id = x.feature_flag_id where x.id = ?`,
      [id],
    );
    const experiment = experimentForResults(row);
    const stored = await sql(
      orm,
      `select metric_uuid, day::text as day, status, result from experiment_metric_result where experiment_id = ? order by day`,
      [id],
    );
    for (const [m, metric] of row.metrics.entries()) {
      const mine = stored.filter((r) => r.metric_uuid === metric.uuid);
      expect(mine.map((r) => r.status)).toEqual(['completed', 'completed', 'completed']);
      const onPostgres = await computePercentileSeries(
        orm.em.fork() as EntityManager,
        pg,
        experiment,
        metric,
        new Date(now.getTime() + 1),
        [0, 1, 2],
      );
      expect(onPostgres).not.toBeInstanceOf(Error);
      // Exactly equal: the same values in the same order from either store.
      expect(mine.map((r) => r.result)).toEqual(JSON.parse(JSON.stringify(onPostgres)));
      for (const d of [0, 1]) {
        const arms = ['control', 'test'].map((key) =>
          m === 0
            ? {
                key,
                values: loads[key][d].values,
                clusters: loads[key][d].clusters,
                exposures: loads[key][d].counts.length,
              }
            : { key, values: loads[key][d].counts },
        );
        const byHand = percentileComparison(arms, {
          percentile: metric.percentile,
          baselineKey: 'control',
          method: 'bayesian',
          unit: m === 0 ? 'per_event' : 'per_person',
        });
        const result = mine[d].result;
        expect(result.baseline.quantile).toBe(byHand.baseline.quantile);
        expect(result.baseline.number_of_samples).toBe(d === 0 ? 40 : 70);
        expect(result.variant_results[0].quantile).toBe(byHand.variant_results[0].quantile);
        expect(result.variant_results[0].chance_to_win).toBeCloseTo(
          byHand.variant_results[0].chance_to_win as number,
          10,
        );
      }
    }
  }, 120_000);
});
