// Experiment results from a small event set whose per-variant counts are checked by hand.
import type { Job } from 'bullmq';
import type { JobData } from '../../../shared/platform/jobs.ts';
import { describe, expect, it } from 'vitest';
import {
  alwaysValidPValue,
  confidenceSequenceHalfWidth,
  sequentialRho2,
} from '../../../shared/experiments/sequential.ts';
import { holmAdjust } from '../../../shared/experiments/stats.ts';
import { computeExperimentResults } from '../../../shared/experiments/results-job.ts';
import { sql } from '../../db.ts';
import { CHECKOUT_METRICS, capture, type SeedEvent } from '../../fixtures.ts';
import { call, eventually, apiAndWorker } from '../../helpers.ts';

const {
  api,
  worker,
  accounts: [account],
} = await apiAndWorker();

const P = () => `/api/projects/${account.projectId}/experiments`;
/** A metric's timeseries_results as the API answers them. */
const timeseriesOf = (experimentId: number, m: { uuid: string; fingerprint: string }) =>
  call(
    api.baseUrl,
    'GET',
    `${P()}/${experimentId}/timeseries_results/?metric_uuid=${m.uuid}&fingerprint=${m.fingerprint}`,
    {
      key: account.apiKey,
    },
  );

describe('experiment results job', () => {
  it('counts exposures and metric values per variant, per day, cumulatively', async () => {
    const today = new Date();
    const dayStart = (offset: number) =>
      new Date(Date.UTC(today.getUTCFullYear(), today.getUTCMonth(), today.getUTCDate() + offset));
    const at = (offset: number, hour: number) => new Date(dayStart(offset).getTime() + hour * 3600_000).toISOString();
    const exp = (
      await call(api.baseUrl, 'POST', `${P()}/`, {
        key: account.apiKey,
        body: {
          name: 'Checkout',
          feature_flag_key: 'checkout',
          start_date: dayStart(-1).toISOString(),
          metrics: [...CHECKOUT_METRICS],
        },
      })
    ).body;
    const exposed = (id: string, variant: string, offset: number) => ({
      event: '$feature_flag_called',
      distinct_id: id,
      timestamp: at(offset, 1),
      properties: { $feature_flag: 'checkout', $feature_flag_response: variant },
    });
    await capture(api.baseUrl, account.projectToken, [
      // Yesterday: c1, c2 in control; t1 in test. c1 buys 10; t1 carts and buys 5 + 7.
      exposed('c1', 'control', -1),
      exposed('c2', 'control', -1),
      exposed('t1', 'test', -1),
      { event: 'purchase', distinct_id: 'c1', timestamp: at(-1, 2), properties: { amount: 10 } },
      { event: 'cart', distinct_id: 't1', timestamp: at(-1, 2) },
      { event: 'purchase', distinct_id: 't1', timestamp: at(-1, 3), properties: { amount: 5 } },
      { event: 'purchase', distinct_id: 't1', timestamp: at(-1, 4), properties: { amount: 7 } },
      // A purchase before exposure does not count; a person in both variants counts nowhere.
      { event: 'purchase', distinct_id: 't2', timestamp: at(-1, 0), properties: { amount: 100 } },
      exposed('t2', 'test', -1),
      exposed('both', 'control', -1),
      exposed('both', 'test', -1),
      { event: 'purchase', distinct_id: 'both', timestamp: at(-1, 5), properties: { amount: 50 } },
      // Today: t3 joins test, carts, buys 4.
      exposed('t3', 'test', 0),
      { event: 'cart', distinct_id: 't3', timestamp: at(0, 2) },
      { event: 'purchase', distinct_id: 't3', timestamp: at(0, 3), properties: { amount: 4 } },
    ]);

    const run = await computeExperimentResults(
      { data: { experimentId: exp.id } } as Job<JobData['experimentResults']>,
      worker.deps,
      new Date(at(0, 6)),
    );
    expect(run.results).toBe(4); // 2 metrics × 2 days

    const [mean, funnel] = (await call(api.baseUrl, 'GET', `${P()}/${exp.id}/`, { key: account.apiKey })).body.metrics;
    const series = async (m: { uuid: string; fingerprint: string }) => (await timeseriesOf(exp.id, m)).body;
    const meanSeries = await series(mean);
    expect(meanSeries.status).toBe('completed');
    const yesterday = dayStart(-1).toISOString().slice(0, 10);
    const todayKey = dayStart(0).toISOString().slice(0, 10);
    const day1 = meanSeries.timeseries[yesterday];
    expect(day1.baseline).toMatchObject({
      key: 'control',
      number_of_samples: 2,
      sum: 10,
      sum_squares: 100,
      validation_failures: ['NOT_ENOUGH_EXPOSURES'],
    });
    expect(day1.variant_results[0]).toMatchObject({
      key: 'test',
      number_of_samples: 2,
      sum: 12,
      sum_squares: 144,
      chance_to_win: null,
    });
    expect(day1.sample_ratio_mismatch).toBeNull(); // under 100 exposures
    const day2 = meanSeries.timeseries[todayKey]; // cumulative: t3 added
    expect(day2.variant_results[0]).toMatchObject({ number_of_samples: 3, sum: 16, sum_squares: 160 });

    const funnelDay2 = (await series(funnel)).timeseries[todayKey];
    expect(funnelDay2.baseline).toMatchObject({ number_of_samples: 2, sum: 0, step_counts: [0, 0] });
    expect(funnelDay2.variant_results[0]).toMatchObject({ number_of_samples: 3, sum: 2, step_counts: [2, 2] });
  });

  it('recalculates on demand through the queue', async () => {
    const exp = (
      await call(api.baseUrl, 'POST', `${P()}/`, {
        key: account.apiKey,
        body: {
          name: 'Queued',
          feature_flag_key: 'queued',
          start_date: new Date(Date.now() - 3600_000).toISOString(),
          metrics: [{ kind: 'ExperimentMetric', metric_type: 'mean', source: { kind: 'EventsNode', event: 'x' } }],
        },
      })
    ).body;
    const res = await call(api.baseUrl, 'POST', `${P()}/${exp.id}/recalculate_timeseries/`, { key: account.apiKey });
    expect(res.status).toBe(202);
    const m = exp.metrics[0];
    const done = await eventually(async () => {
      const body = (await timeseriesOf(exp.id, m)).body;
      return body.status === 'completed' ? body : null;
    });
    expect(
      Object.values(done.timeseries).every(
        (v) => (v as { baseline?: { number_of_samples: number } } | null)?.baseline?.number_of_samples === 0,
      ),
    ).toBe(true);
  });

  it('reports the sample ratio mismatch of a skewed split, and Holm-adjusted p-values, in timeseries_results', async () => {
    const yesterday = new Date(Date.now() - 86400_000);
    const exp = (
      await call(api.baseUrl, 'POST', `${P()}/`, {
        key: account.apiKey,
        body: {
          name: 'Skewed',
          feature_flag_key: 'skewed',
          start_date: new Date(Date.UTC(yesterday.getUTCFullYear(), yesterday.getUTCMonth(), yesterday.getUTCDate())),
          metrics: [...CHECKOUT_METRICS],
          stats_config: { method: 'frequentist', multiple_comparison_correction: { method: 'holm' } },
        },
      })
    ).body;
    // The flag splits 50/50, but 120 persons saw control and 60 saw test; 30 and 25 of them bought.
    const t = (minutes: number) => new Date(Date.now() - 3600_000 + minutes * 1000).toISOString();
    const events: SeedEvent[] = [];
    for (const [variant, persons, buyers] of [
      ['control', 120, 30],
      ['test', 60, 25],
    ] as const) {
      for (let i = 0; i < persons; i++) {
        const id = `skewed-${variant}-${i}`;
        events.push({
          event: '$feature_flag_called',
          distinct_id: id,
          timestamp: t(0),
          properties: { $feature_flag: 'skewed', $feature_flag_response: variant },
        });
        if (i < buyers)
          events.push(
            { event: 'cart', distinct_id: id, timestamp: t(1) },
            { event: 'purchase', distinct_id: id, timestamp: t(2), properties: { amount: 10 + (i % 7) } },
          );
      }
    }
    await capture(api.baseUrl, account.projectToken, events);
    const queued = await call(api.baseUrl, 'POST', `${P()}/${exp.id}/recalculate_timeseries/`, { key: account.apiKey });
    expect(queued.status).toBe(202);

    const latest = async (m: { uuid: string; fingerprint: string }) =>
      eventually(async () => {
        const body = (await timeseriesOf(exp.id, m)).body;
        const today = new Date().toISOString().slice(0, 10);
        return body.status === 'completed' ? body.timeseries[today] : null;
      });
    const [mean, funnel] = await Promise.all(exp.metrics.map(latest));
    for (const result of [mean, funnel]) {
      expect(result.baseline.number_of_samples).toBe(120);
      expect(result.variant_results[0].number_of_samples).toBe(60);
      // Expected 90/90: chi-square (30² + 30²)/90 = 20 on 1 df, p = 7.7442e-6 (scipy chi2.sf(20, 1)).
      expect(result.sample_ratio_mismatch).toMatchObject({
        expected: { control: 90, test: 90 },
        observed: { control: 120, test: 60 },
        warning: true,
      });
      expect(Math.abs(result.sample_ratio_mismatch.p_value / 7.744216431044088e-6 - 1)).toBeLessThan(1e-8);
      expect(result.multiple_comparison_correction).toEqual({
        method: 'holm',
        scope: 'experiment',
        alpha: 0.05,
        family_size: 2,
      });
    }
    // Holm over the experiment's two comparisons (one per metric); each interval at its own alpha.
    const [m, f] = [mean.variant_results[0], funnel.variant_results[0]];
    expect(m.unadjusted_p_value).toBeGreaterThan(0);
    expect(f.unadjusted_p_value).toBeGreaterThan(0);
    const adjusted = holmAdjust([m.unadjusted_p_value, f.unadjusted_p_value]);
    expect(m.p_value).toBeCloseTo(adjusted[0], 12);
    expect(f.p_value).toBeCloseTo(adjusted[1], 12);
    for (const v of [m, f]) {
      expect(v.significant).toBe(v.confidence_interval[0] > 0 || v.confidence_interval[1] < 0);
      expect(v.significant).toBe(v.p_value < 0.05);
    }
  });

  it('sequential testing: the always-valid p-value and the confidence sequence in timeseries_results', async () => {
    const yesterday = new Date(Date.now() - 86400_000);
    const exp = (
      await call(api.baseUrl, 'POST', `${P()}/`, {
        key: account.apiKey,
        body: {
          name: 'Sequential',
          feature_flag_key: 'sequential',
          start_date: new Date(Date.UTC(yesterday.getUTCFullYear(), yesterday.getUTCMonth(), yesterday.getUTCDate())),
          metrics: [CHECKOUT_METRICS[1]],
          stats_config: { method: 'frequentist', sequential: { enabled: true, tuning_parameter: 1000 } },
        },
      })
    ).body;
    expect(exp.stats_config.sequential).toEqual({ enabled: true, tuning_parameter: 1000 });
    // 100 persons per variant; 20 of control's and 45 of test's complete the funnel.
    const t = (minutes: number) => new Date(Date.now() - 3600_000 + minutes * 1000).toISOString();
    const events: SeedEvent[] = [];
    for (const [variant, buyers] of [
      ['control', 20],
      ['test', 45],
    ] as const) {
      for (let i = 0; i < 100; i++) {
        const id = `sequential-${variant}-${i}`;
        events.push({
          event: '$feature_flag_called',
          distinct_id: id,
          timestamp: t(0),
          properties: { $feature_flag: 'sequential', $feature_flag_response: variant },
        });
        if (i < buyers)
          events.push(
            { event: 'cart', distinct_id: id, timestamp: t(1) },
            { event: 'purchase', distinct_id: id, timestamp: t(2), properties: { amount: 10 } },
          );
      }
    }
    await capture(api.baseUrl, account.projectToken, events);
    expect(
      (await call(api.baseUrl, 'POST', `${P()}/${exp.id}/recalculate_timeseries/`, { key: account.apiKey })).status,
    ).toBe(202);
    const m = exp.metrics[0];
    const result = await eventually(async () => {
      const body = (await timeseriesOf(exp.id, m)).body;
      return body.status === 'completed' ? body.timeseries[new Date().toISOString().slice(0, 10)] : null;
    });
    expect(result.sequential_testing).toEqual({
      method: 'asymptotic_confidence_sequence',
      tuning_parameter: 1000,
      alpha: 0.05,
    });
    const v = result.variant_results[0];
    expect([result.baseline.sum, v.sum]).toEqual([20, 45]);
    // θ = 0.45/0.2 − 1 = 1.25; V = 0.45·0.55/(100·0.04) + 0.45²·0.16/(100·0.0016) = 0.061875 + 0.2025
    const [theta, variance] = [1.25, 0.264375];
    const rho2 = sequentialRho2(0.05, 1000);
    expect(v.p_value).toBeCloseTo(alwaysValidPValue(theta, variance, 200, rho2), 10);
    const w = confidenceSequenceHalfWidth(variance, 200, rho2, 0.05);
    expect(v.confidence_interval[0]).toBeCloseTo(theta - w, 10);
    expect(v.confidence_interval[1]).toBeCloseTo(theta + w, 10);
    expect(v.significant).toBe(v.confidence_interval[0] > 0);
    expect(v.significant).toBe(v.p_value < 0.05);
  });

  // PostHog's test_cuped_mean_metric.py, on a timeline ending now: the same persons, amounts and
  // offsets from the exposure, so the same covariate sums.
  it('CUPED: covariate sums over the lookback before each first exposure (PostHog’s golden values)', async () => {
    const startDay = new Date(Date.now() - 3 * 86400_000);
    const start = Date.UTC(startDay.getUTCFullYear(), startDay.getUTCMonth(), startDay.getUTCDate());
    const at = (days: number) => new Date(start + 12 * 3600_000 + days * 86400_000).toISOString();
    const mean = {
      kind: 'ExperimentMetric',
      metric_type: 'mean',
      source: { kind: 'EventsNode', event: 'purchase', math: 'sum', math_property: 'amount' },
    };
    const run = async (
      key: string,
      lookback: number,
      events: (string | number)[][],
      metric: Record<string, unknown> = mean,
    ) => {
      const exp = (
        await call(api.baseUrl, 'POST', `${P()}/`, {
          key: account.apiKey,
          body: {
            name: key,
            feature_flag_key: key,
            start_date: new Date(start).toISOString(),
            metrics: [metric],
            stats_config: { method: 'frequentist', cuped: { enabled: lookback > 0, lookback_days: lookback || 7 } },
          },
        })
      ).body;
      await capture(
        api.baseUrl,
        account.projectToken,
        events.map(([id, event, day, value]) =>
          event === '$feature_flag_called'
            ? {
                event,
                distinct_id: `${key}-${id}`,
                timestamp: at(Number(day)),
                properties: { $feature_flag: key, $feature_flag_response: value },
              }
            : {
                event: String(event),
                distinct_id: `${key}-${id}`,
                timestamp: at(Number(day)),
                properties: { amount: value },
              },
        ),
      );
      await computeExperimentResults(
        { data: { experimentId: exp.id } } as Job<JobData['experimentResults']>,
        worker.deps,
      );
      const m = exp.metrics[0];
      const body = (await timeseriesOf(exp.id, m)).body;
      expect(body.status).toBe('completed');
      return body.timeseries[new Date().toISOString().slice(0, 10)];
    };

    // test_cuped_mean_metric_collects_covariate_columns (7-day lookback; purchases 2 days before).
    const seven = await run('cuped-seven', 7, [
      ...[
        ['c1', 'control', 3, 10],
        ['c2', 'control', 4, 20],
        ['t1', 'test', 5, 30],
        ['t2', 'test', 6, 40],
      ].flatMap(([id, variant, pre, post]) => [
        [id, 'purchase', -2, pre],
        [id, '$feature_flag_called', 0, variant],
        [id, 'purchase', 0.04, post],
      ]),
    ]);
    expect(seven.baseline).toMatchObject({
      sum: 30,
      covariate_sum: 7,
      covariate_sum_squares: 25,
      covariate_sum_product: 110,
    });
    expect(seven.variant_results[0]).toMatchObject({
      sum: 70,
      covariate_sum: 11,
      covariate_sum_squares: 61,
      covariate_sum_product: 390,
    });

    // test_cuped_uses_pre_exposure_window_relative_to_first_exposure (2-day lookback: the purchase
    // 3 days before the first exposure is outside it; a second exposure does not move the window).
    const two = await run('cuped-two', 2, [
      ['c1', 'purchase', -3, 100],
      ['c1', 'purchase', -1, 5],
      ['c1', '$feature_flag_called', 0, 'control'],
      ['c1', 'purchase', 1, 7],
      ['c1', '$feature_flag_called', 2, 'control'],
      ['t1', 'purchase', -1, 6],
      ['t1', '$feature_flag_called', 0, 'test'],
      ['t1', 'purchase', 1, 8],
    ]);
    expect(two.baseline).toMatchObject({
      sum: 7,
      covariate_sum: 5,
      covariate_sum_squares: 25,
      covariate_sum_product: 35,
    });
    expect(two.variant_results[0]).toMatchObject({ sum: 8, covariate_sum: 6, covariate_sum_product: 48 });

    // test_cuped_adjusts_statistical_result: 60 persons a variant, pre = i + 1, post = pre + effect
    // (0 control, 1 test): CUPED gives a smaller p-value and a narrower interval.
    const correlated = [
      ['control', 0],
      ['test', 1],
    ].flatMap(([variant, effect]) =>
      Array.from({ length: 60 }, (_, i) => [
        [`${variant}-${i}`, 'purchase', -1, i + 1],
        [`${variant}-${i}`, '$feature_flag_called', 0, variant],
        [`${variant}-${i}`, 'purchase', 0.04, i + 1 + (effect as number)],
      ]).flat(),
    );
    const plain = (await run('cuped-off', 0, correlated)).variant_results[0];
    const adjusted = (await run('cuped-on', 7, correlated)).variant_results[0];
    expect(plain.covariate_sum).toBeUndefined();
    expect(adjusted.covariate_sum).toBe(1830);
    expect(adjusted.p_value).toBeLessThan(plain.p_value);
    const width = (v: { confidence_interval: number[] }) => v.confidence_interval[1] - v.confidence_interval[0];
    expect(width(adjusted)).toBeLessThan(width(plain));
  });

  // PostHog's test_cuped_funnel_metric.py: x = 1 when the last step's event happened in the lookback.
  it('CUPED on funnels: the last step in the lookback is the covariate (PostHog’s golden values)', async () => {
    const startDay = new Date(Date.now() - 3 * 86400_000);
    const start = Date.UTC(startDay.getUTCFullYear(), startDay.getUTCMonth(), startDay.getUTCDate());
    const at = (days: number) => new Date(start + 12 * 3600_000 + days * 86400_000).toISOString();
    const funnel = (...events: string[]) => ({
      kind: 'ExperimentMetric',
      metric_type: 'funnel',
      series: events.map((event) => ({ kind: 'EventsNode', event })),
    });
    const run = async (
      key: string,
      lookback: number,
      metric: Record<string, unknown>,
      events: [string, string, number, string?][],
    ) => {
      const exp = (
        await call(api.baseUrl, 'POST', `${P()}/`, {
          key: account.apiKey,
          body: {
            name: key,
            feature_flag_key: key,
            start_date: new Date(start).toISOString(),
            metrics: [metric],
            stats_config: { method: 'frequentist', cuped: { enabled: true, lookback_days: lookback } },
          },
        })
      ).body;
      await capture(
        api.baseUrl,
        account.projectToken,
        events.map(([id, event, day, variant]) => ({
          event,
          distinct_id: `${key}-${id}`,
          timestamp: at(day),
          properties: variant ? { $feature_flag: key, $feature_flag_response: variant } : {},
        })),
      );
      await computeExperimentResults(
        { data: { experimentId: exp.id } } as Job<JobData['experimentResults']>,
        worker.deps,
      );
      const m = exp.metrics[0];
      const body = (await timeseriesOf(exp.id, m)).body;
      return body.timeseries[new Date().toISOString().slice(0, 10)];
    };
    const hour = 1 / 24;
    const exposed = (id: string, variant: string, day = 0): [string, string, number, string] => [
      id,
      '$feature_flag_called',
      day,
      variant,
    ];

    // test_cuped_funnel_metric_collects_covariate_columns
    const collected = await run('funnel-cuped-one', 7, funnel('checkout completed'), [
      ['c1', 'checkout completed', -2],
      exposed('c1', 'control'),
      ['c1', 'checkout completed', hour],
      exposed('c2', 'control'),
      ['c2', 'checkout completed', hour],
      ['t1', 'checkout completed', -2],
      exposed('t1', 'test'),
      ['t2', 'checkout completed', -2],
      exposed('t2', 'test'),
      ['t2', 'checkout completed', hour],
    ]);
    expect(collected.baseline).toMatchObject({
      sum: 2,
      covariate_sum: 1,
      covariate_sum_squares: 1,
      covariate_sum_product: 1,
    });
    expect(collected.variant_results[0]).toMatchObject({
      sum: 1,
      covariate_sum: 2,
      covariate_sum_squares: 2,
      covariate_sum_product: 1,
    });

    // test_cuped_uses_pre_exposure_window_relative_to_first_exposure (2 days)
    const windowed = await run('funnel-cuped-window', 2, funnel('checkout completed'), [
      ['c1', 'checkout completed', -3],
      ['c1', 'checkout completed', -1],
      exposed('c1', 'control'),
      ['c1', 'checkout completed', 1],
      exposed('c1', 'control', 2),
      ['t1', 'checkout completed', -1],
      exposed('t1', 'test'),
      ['t1', 'checkout completed', 1],
    ]);
    expect(windowed.baseline).toMatchObject({ sum: 1, covariate_sum: 1, covariate_sum_product: 1 });
    expect(windowed.variant_results[0]).toMatchObject({ sum: 1, covariate_sum: 1, covariate_sum_product: 1 });

    // test_cuped_multi_step_funnel_uses_last_step_for_covariate
    const steps = await run('funnel-cuped-steps', 7, funnel('signup', 'checkout completed'), [
      ['c1', 'signup', -2],
      exposed('c1', 'control'),
      ['c1', 'signup', hour],
      ['c1', 'checkout completed', 1.5 * hour],
      ['c2', 'checkout completed', -2],
      exposed('c2', 'control'),
      ['c2', 'signup', hour],
      ['c2', 'checkout completed', 1.5 * hour],
      exposed('t1', 'test'),
      ['t1', 'signup', hour],
    ]);
    expect(steps.baseline).toMatchObject({ sum: 2, covariate_sum: 1, covariate_sum_product: 1 });
    expect(steps.variant_results[0]).toMatchObject({ sum: 0, covariate_sum: 0, covariate_sum_product: 0 });
  });
});

describe('ratio metrics', () => {
  it('Σ numerator / Σ denominator per variant, with the per-person sums PostHog returns (test_basic_ratio_metric), continued from a stored day', async () => {
    const today = new Date();
    const dayStart = (offset: number) =>
      new Date(Date.UTC(today.getUTCFullYear(), today.getUTCMonth(), today.getUTCDate() + offset));
    const at = (offset: number, hour: number) => new Date(dayStart(offset).getTime() + hour * 3600_000).toISOString();
    const ratio = {
      kind: 'ExperimentMetric',
      metric_type: 'ratio',
      numerator: { kind: 'EventsNode', event: 'purchase', math: 'sum', math_property: 'amount' },
      denominator: { kind: 'EventsNode', event: 'purchase', math: 'total' },
    };
    const exp = (
      await call(api.baseUrl, 'POST', `${P()}/`, {
        key: account.apiKey,
        body: {
          name: 'Revenue per purchase',
          feature_flag_key: 'ratio-checkout',
          start_date: dayStart(-2).toISOString(),
          stats_config: { method: 'frequentist' },
          metrics: [ratio, CHECKOUT_METRICS[0]],
        },
      })
    ).body;
    expect(exp.metrics[0]).toMatchObject({ metric_type: 'ratio', numerator: ratio.numerator });
    // PostHog's test_basic_ratio_metric: control 10 persons, 0–2 buy once for 10, 3–5 twice for 15;
    // test 10 persons, 0–3 buy once for 20, 4–7 twice for 10. The second purchases fall a day later.
    const events: SeedEvent[] = [];
    const buy = (id: string, day: number, amount: number) =>
      events.push({ event: 'purchase', distinct_id: id, timestamp: at(day, 2), properties: { amount } });
    for (const [variant, once, twice, each1, each2] of [
      ['control', 3, 3, 10, 15],
      ['test', 4, 4, 20, 10],
    ] as const) {
      for (let i = 0; i < 10; i++) {
        const id = `ratio_${variant}_${i}`;
        events.push({
          event: '$feature_flag_called',
          distinct_id: id,
          timestamp: at(-2, 1),
          properties: { $feature_flag: 'ratio-checkout', $feature_flag_response: variant },
        });
        if (i < once) buy(id, -2, each1);
        else if (i < once + twice) {
          buy(id, -2, each2);
          buy(id, -1, each2);
        }
      }
    }
    await capture(api.baseUrl, account.projectToken, events);

    const job = { data: { experimentId: exp.id } } as Job<JobData['experimentResults']>;
    expect((await computeExperimentResults(job, worker.deps, new Date(at(-1, 1)))).full).toBe(1);
    // As the next day's run would find it: day −2 computed after every event and person arrived.
    await sql(api.orm, `update experiment_metric_result set computed_at = now() where experiment_id = ? and day < ?`, [
      exp.id,
      dayStart(-1).toISOString().slice(0, 10),
    ]);
    // That run continues day −2's stored sums and persons' states (numerators and denominators).
    expect(await computeExperimentResults(job, worker.deps, new Date(at(-1, 6)))).toMatchObject({
      incremental: 1,
      full: 0,
    });

    const m = exp.metrics[0];
    const body = (await timeseriesOf(exp.id, m)).body;
    expect(body.status).toBe('partial'); // (today not computed yet)
    const day1 = body.timeseries[dayStart(-2).toISOString().slice(0, 10)];
    expect(day1.baseline).toMatchObject({ key: 'control', number_of_samples: 10, sum: 75, denominator_sum: 6 });
    const day2 = body.timeseries[dayStart(-1).toISOString().slice(0, 10)];
    // PostHog's golden sums (120 / 9 and 160 / 12), and Σm², Σd², Σm·d of the persons' totals.
    expect(day2.baseline).toMatchObject({
      key: 'control',
      number_of_samples: 10,
      sum: 120,
      sum_squares: 3 * 10 ** 2 + 3 * 30 ** 2,
      denominator_sum: 9,
      denominator_sum_squares: 3 + 3 * 4,
      numerator_denominator_sum_product: 3 * 10 + 3 * 30 * 2,
    });
    expect(day2.variant_results[0]).toMatchObject({
      key: 'test',
      number_of_samples: 10,
      sum: 160,
      sum_squares: 8 * 20 ** 2,
      denominator_sum: 12,
      denominator_sum_squares: 4 + 4 * 4,
      numerator_denominator_sum_product: 4 * 20 + 4 * 20 * 2,
      p_value: null, // under 50 exposures, as PostHog withholds them
      validation_failures: ['NOT_ENOUGH_EXPOSURES'],
    });
  });

  it('refuses a ratio metric without a numerator and denominator it can compute', async () => {
    for (const bad of [
      { kind: 'ExperimentMetric', metric_type: 'ratio', numerator: { kind: 'EventsNode', event: 'a' } },
      {
        kind: 'ExperimentMetric',
        metric_type: 'ratio',
        numerator: { kind: 'EventsNode', event: 'a', math: 'sum' },
        denominator: { kind: 'EventsNode', event: 'b' },
      },
    ]) {
      const res = await call(api.baseUrl, 'POST', `${P()}/`, {
        key: account.apiKey,
        body: { name: 'Bad ratio', feature_flag_key: `bad-ratio-${Math.random()}`.replace('.', ''), metrics: [bad] },
      });
      expect(res.status).toBe(400);
      expect(res.body).toMatchObject({ type: 'validation_error', attr: 'metrics' });
    }
  });
});
