// Percentile metrics through the API on the PostgreSQL event store: created in an experiment (bad ones
// refused with 400s), events captured, the results job run, and timeseries_results giving each day's
// quantiles and differences, equal to percentileComparison on the values the test seeded (per person:
// each person's sum; per event: each event's latency, clustered by person).
import type { Job } from 'bullmq';
import { describe, expect, it } from 'vitest';
import type { JobData } from '../../../shared/platform/jobs.ts';
import { computeExperimentResults } from '../../../shared/experiments/results-job.ts';
import { percentileComparison } from '../../../shared/experiments/percentile.ts';
import { capture, type SeedEvent } from '../../fixtures.ts';
import { call, apiAndWorker } from '../../helpers.ts';

const {
  api,
  worker,
  accounts: [account],
} = await apiAndWorker();

const P = () => `/api/projects/${account.projectId}/experiments`;
const DAY = 86400_000;
const now = new Date();
const dayStart = (offset: number) => Math.floor(now.getTime() / DAY) * DAY + offset * DAY;
const at = (offset: number, minutes: number) => new Date(dayStart(offset) + minutes * 60_000).toISOString();

const latencyP90 = {
  kind: 'ExperimentMetric',
  metric_type: 'percentile',
  percentile: 0.9,
  percentile_unit: 'per_event',
  source: { kind: 'EventsNode', event: 'api_call', math: 'sum', math_property: '$latency' },
};
const spendP50 = {
  kind: 'ExperimentMetric',
  metric_type: 'percentile',
  percentile: 0.5,
  percentile_unit: 'per_person',
  source: { kind: 'EventsNode', event: 'purchase', math: 'sum', math_property: 'amount' },
};

/** Deterministic values: person i of a variant makes 1 + i % 4 calls; test's are 1.5× slower. */
function seeded(flag: string) {
  const events: SeedEvent[] = [];
  const latencies: Record<string, { values: number[]; clusters: number[] }> = {
    control: { values: [], clusters: [] },
    test: { values: [], clusters: [] },
  };
  const spend: Record<string, number[]> = { control: [], test: [] };
  for (const [v, variant] of ['control', 'test'].entries()) {
    for (let i = 0; i < 60; i++) {
      const id = `${flag}-${variant}-${i}`;
      events.push({
        event: '$feature_flag_called',
        distinct_id: id,
        timestamp: at(-1, 60 + i),
        properties: { $feature_flag: flag, $feature_flag_response: variant },
      });
      // A call before the exposure does not count.
      events.push({ event: 'api_call', distinct_id: id, timestamp: at(-1, 10), properties: { $latency: 99_999 } });
      for (let k = 0; k < 1 + (i % 4); k++) {
        const latency = Math.round((50 + ((i * 37 + k * 11) % 200)) * (variant === 'test' ? 1.5 : 1));
        events.push({
          event: 'api_call',
          distinct_id: id,
          timestamp: at(-1, 200 + i + k),
          properties: { $latency: latency },
        });
        latencies[variant].values.push(latency);
        latencies[variant].clusters.push(v * 1000 + i);
      }
      // Every third person buys twice; a call without a latency is left out of the per-event metric.
      events.push({ event: 'api_call', distinct_id: id, timestamp: at(-1, 300 + i) });
      let sum = 0;
      if (i % 3 === 0)
        for (const amount of [10 + i, 5 + (v ? 7 : 0)]) {
          events.push({ event: 'purchase', distinct_id: id, timestamp: at(-1, 400 + i), properties: { amount } });
          sum += amount;
        }
      spend[variant].push(sum);
    }
  }
  return { events, latencies, spend };
}

/** Equal but for rounding (the test adds the values up in another order): numbers to 1e-12 relative. */
function expectClose(actual: unknown, expected: unknown, path = '$') {
  if (typeof expected === 'number' && typeof actual === 'number') {
    expect(Math.abs(actual - expected), path).toBeLessThanOrEqual(1e-12 * Math.max(1, Math.abs(expected)));
  } else if (expected && typeof expected === 'object') {
    expect(actual && typeof actual === 'object', path).toBe(true);
    expect(Object.keys(actual as object).sort(), path).toEqual(Object.keys(expected).sort());
    for (const [k, v] of Object.entries(expected))
      expectClose((actual as Record<string, unknown>)[k], v, `${path}.${k}`);
  } else expect(actual, path).toEqual(expected);
}

describe('percentile metrics through the API (PostgreSQL event store)', () => {
  it('refuses a percentile outside [0.5, 0.99], a bad unit or a missing property with 400s', async () => {
    for (const [metric, pattern] of [
      [{ ...latencyP90, percentile: 0.995 }, /0\.5 to 0\.99/],
      [{ ...latencyP90, percentile: 0.1 }, /0\.5 to 0\.99/],
      [{ ...latencyP90, percentile_unit: 'per_session' }, /per_person, per_event/],
      [{ ...latencyP90, source: { kind: 'EventsNode', event: 'api_call' } }, /math_property/],
    ] as const) {
      const res = await call(api.baseUrl, 'POST', `${P()}/`, {
        key: account.apiKey,
        body: { name: 'bad', feature_flag_key: 'bad-percentile', metrics: [metric] },
      });
      expect(res.status, res.text).toBe(400);
      expect(res.body).toMatchObject({ type: 'validation_error', attr: 'metrics' });
      expect(res.body.detail).toMatch(pattern);
    }
    const saved = await call(api.baseUrl, 'POST', `/api/projects/${account.projectId}/experiment_saved_metrics/`, {
      key: account.apiKey,
      body: { name: 'p', query: { ...latencyP90, percentile: 1.5 } },
    });
    expect(saved.status, saved.text).toBe(400);
    expect(saved.body).toMatchObject({ type: 'validation_error', attr: 'query' });
  });

  it('computes P90 latency per event and P50 spend per person, as percentileComparison does on the same values', async () => {
    const flag = 'percentile-api';
    const created = await call(api.baseUrl, 'POST', `${P()}/`, {
      key: account.apiKey,
      body: {
        name: flag,
        feature_flag_key: flag,
        start_date: new Date(dayStart(-1)).toISOString(),
        metrics: [latencyP90, spendP50],
        stats_config: { method: 'frequentist' },
      },
    });
    expect(created.status, created.text).toBe(201);
    const { events, latencies, spend } = seeded(flag);
    for (let i = 0; i < events.length; i += 500)
      await capture(api.baseUrl, account.projectToken, events.slice(i, i + 500));
    const run = await computeExperimentResults(
      { data: { experimentId: created.body.id } } as Job<JobData['experimentResults']>,
      worker.deps,
      new Date(Math.max(dayStart(0) + 1000, now.getTime())),
    );
    expect(run.results).toBe(4); // 2 metrics × 2 days
    const [latency, spendMetric] = created.body.metrics;
    const series = async (m: { uuid: string; fingerprint: string }) => {
      const res = await call(
        api.baseUrl,
        'GET',
        `${P()}/${created.body.id}/timeseries_results/?metric_uuid=${m.uuid}&fingerprint=${m.fingerprint}`,
        { key: account.apiKey },
      );
      expect(res.status, res.text).toBe(200);
      expect(res.body.status).toBe('completed');
      return res.body.timeseries;
    };
    const yesterday = new Date(dayStart(-1)).toISOString().slice(0, 10);
    const today = new Date(dayStart(0)).toISOString().slice(0, 10);

    const latencySeries = await series(latency);
    const expected = percentileComparison(
      ['control', 'test'].map((key) => ({ key, ...latencies[key], exposures: 60 })),
      { percentile: 0.9, baselineKey: 'control', method: 'frequentist', unit: 'per_event' },
    );
    expectClose(latencySeries[yesterday], JSON.parse(JSON.stringify(expected)));
    expect(latencySeries[today]).toEqual(latencySeries[yesterday]); // cumulative: nothing new today
    const v = latencySeries[yesterday].variant_results[0];
    expect(latencySeries[yesterday].baseline).toMatchObject({
      key: 'control',
      number_of_samples: 60,
      number_of_values: 150,
    });
    expect(v).toMatchObject({ key: 'test', method: 'frequentist', significant: true });
    expect(v.difference.relative).toBeGreaterThan(0.3);
    expect(v.p_value).toBeLessThan(0.05);

    const spendSeries = await series(spendMetric);
    const expectedSpend = percentileComparison(
      ['control', 'test'].map((key) => ({ key, values: spend[key] })),
      { percentile: 0.5, baselineKey: 'control', method: 'frequentist', unit: 'per_person' },
    );
    expectClose(spendSeries[yesterday], JSON.parse(JSON.stringify(expectedSpend)));
    expect(spendSeries[yesterday].baseline).toMatchObject({ number_of_samples: 60, quantile: 0 });
  }, 120_000);
});
