import { describe, expect, it } from 'vitest';
import {
  evaluateGuardrail,
  guardrailPlannedSamplePerArm,
  plannedExposuresPerArm,
} from '../../../shared/experiments/guardrails.ts';
import {
  confidenceSequenceHalfWidth,
  relativeEffectEstimate,
  sequentialRho2,
} from '../../../shared/experiments/sequential.ts';
import {
  breakerSamplePerArm,
  fixedHorizonSamplePerArm,
  formatStopFraction,
  GUARDRAIL_HARM,
  guardrailScenario,
  guardrailStopRates,
} from '../../../shared/experiments/guardrail-simulation.ts';
import { formatRate } from '../../../shared/experiments/simulation.ts';

// The circuit breaker by seeded simulation, through its real decision (evaluateGuardrail of
// shared/experiments/guardrails.ts); bench/guardrail-simulation.ts runs the same suites at full size,
// with checks every 5 minutes and a conversion metric too, for README's figures.
//
// Here: a per-user mean (CV 0.6) whose increase is bad in even experiments and whose decrease is bad
// in odd ones (its draws cost O(1) a look, so 1,000s of experiments take seconds), checked hourly for
// 14 days (336 looks). Fewer looks than the worker's 288 a day can only lower a sequential rule's
// false stops, but the always-valid bound holds for any number of looks (Ville's inequality), and the
// bench measures the 5-minute schedule: the false-stop rates there are as small.
//
// The scenario README publishes: tolerated_harm h = 1%, and a planned sample of 4 × n₈₀ per arm, n₈₀
// being the fixed-horizon sample that detects a 5% change on the metric with 80% power at α = 0.05
// (2,377 per arm for this metric). Binomial standard errors: at a true rate p over n experiments,
// sqrt(p(1 − p)/n) — 0.69% for p = 5% over 1,000; 1.3% for p = 80% over 1,000. The rates the rule has
// (≤ 0.3% false stops, ~90% power) sit > 6 standard errors inside both bounds, so a correct
// rule fails with negligible probability; the controls show the harness sees a rule that fails.

const MEAN_METRICS = [
  { metric: { kind: 'mean', mean: 10, sd: 6 }, direction: 'increase_is_bad' },
  { metric: { kind: 'mean', mean: 10, sd: 6 }, direction: 'decrease_is_bad' },
] as const;
const HOURLY = { metrics: [...MEAN_METRICS], looksPerDay: 24 };
const H = 0.01;
const PLANNED = 4;

describe('circuit breaker: seeded simulations of the guardrail checked hourly for 14 days', () => {
  it('the planned sample is 4 × the fixed-horizon sample of a 5% change', () => {
    expect(fixedHorizonSamplePerArm(MEAN_METRICS[0].metric, GUARDRAIL_HARM)).toBe(2377);
  });

  it('false stops ≤ 5% without harm and at exactly the tolerated harm; far above with a fixed-horizon interval checked as often', {
    timeout: 120_000,
  }, () => {
    const experiments = 1000;
    const aa = guardrailStopRates(experiments, 20261125, guardrailScenario(H, 0, PLANNED, HOURLY), [
      'always_valid',
      'fixed_horizon',
    ]);
    const boundary = guardrailStopRates(experiments, 33, guardrailScenario(H, H, PLANNED, HOURLY), [
      'always_valid',
      'fixed_horizon',
    ]);
    console.info({
      aa: formatRate(aa.always_valid.stops),
      aaFixedHorizon: formatRate(aa.fixed_horizon.stops),
      boundary: formatRate(boundary.always_valid.stops),
      boundaryFixedHorizon: formatRate(boundary.fixed_horizon.stops),
    });
    expect(aa.always_valid.stops.rate).toBeLessThanOrEqual(0.05);
    expect(boundary.always_valid.stops.rate).toBeLessThanOrEqual(0.05);
    // The control: the naive interval θ̂ ± 1.96·√V under the same rule and looks stops far too often.
    expect(boundary.fixed_horizon.stops.rate).toBeGreaterThan(0.1);
  });

  it('a 5% harm is stopped in ≥ 80% of runs within the planned sample; not at the fixed-horizon sample', {
    timeout: 120_000,
  }, () => {
    const planned = guardrailStopRates(1000, 7, guardrailScenario(H, GUARDRAIL_HARM, PLANNED, HOURLY));
    // The control: at 1 × n₈₀ (what a fixed-horizon calculator would plan) the breaker rarely stops it.
    const short = guardrailStopRates(1000, 8, guardrailScenario(H, GUARDRAIL_HARM, 1, HOURLY));
    console.info({
      power: `${formatRate(planned.always_valid.stops)}, at ${formatStopFraction(planned.always_valid)} of the sample on average`,
      powerAtFixedHorizonSample: formatRate(short.always_valid.stops),
    });
    expect(planned.always_valid.stops.rate).toBeGreaterThanOrEqual(0.8);
    expect(short.always_valid.stops.rate).toBeLessThan(0.5);
  });
});

// The fix for the power above: a planned sample the breaker can meet. At n₈₀ a fixed-horizon test
// needs the estimate 2.80 standard errors from 0; the breaker needs its always-valid interval (~3
// standard errors wide at best) beyond the tolerated harm h, i.e. 3.88 standard errors from h: for a
// 5% harm and h = 1%, (3.88/2.80)² · (5/4)² = 3.0 × n₈₀ (guardrailPlannedSamplePerArm). An experiment
// that plans it (parameters.recommended_sample_size) gets an interval tuned to it (guardrailTau), as
// this scenario ('breaker') does; with τ = h instead, 3 × n₈₀ gave 71.6% in the bench.
describe('circuit breaker with its own planned sample (the interval tuned to it)', () => {
  it('plans 3 × n₈₀ for a 5% harm with 1% tolerated; the check is the asymptotic confidence sequence with N* = both arms planned', () => {
    const metric = MEAN_METRICS[0].metric;
    expect(breakerSamplePerArm(metric, GUARDRAIL_HARM, H)).toBe(7111);
    expect(
      breakerSamplePerArm(metric, GUARDRAIL_HARM, H) / fixedHorizonSamplePerArm(metric, GUARDRAIL_HARM),
    ).toBeCloseTo(2.99, 2);
    // PostHog's recommended_sample_size counts the persons of all variants.
    expect(plannedExposuresPerArm({ recommended_sample_size: 14_222 }, 2)).toBe(7111);
    expect(plannedExposuresPerArm({}, 2)).toBeNull();
    // A smaller harm needs more.
    expect(guardrailPlannedSamplePerArm(0.72, 0.02, 0.01)).toBeGreaterThan(
      guardrailPlannedSamplePerArm(0.72, 0.05, 0.01),
    );
    const control = { key: 'control', number_of_samples: 3000, sum: 30_000, sum_squares: 30_000 * 10 + 3000 * 36 };
    const test = { key: 'test', number_of_samples: 3000, sum: 31_500, sum_squares: 31_500 * 10.5 + 3000 * 36 };
    const guardrail = { metric_uuid: 'm', direction: 'increase_is_bad' as const, tolerated_harm: H };
    const [check] = evaluateGuardrail(guardrail, 'mean', [control, test], 'control', 0.05, 7111);
    const effect = relativeEffectEstimate(test, control, 'mean')!;
    const w = confidenceSequenceHalfWidth(effect.variance, 6000, sequentialRho2(0.05, 2 * 7111), 0.05);
    expect(check.interval![0]).toBeCloseTo(effect.estimate - w, 12);
    expect(check.interval![1]).toBeCloseTo(effect.estimate + w, 12);
  });

  it('a 5% harm is stopped in ≥ 80% of runs within that planned sample; false stops ≤ 5% without harm and at the tolerated harm', {
    timeout: 120_000,
  }, () => {
    const plan = { ...HOURLY, plan: 'breaker' as const };
    const power = guardrailStopRates(1000, 7, guardrailScenario(H, GUARDRAIL_HARM, 1, plan));
    const aa = guardrailStopRates(1000, 20261125, guardrailScenario(H, 0, 1, plan));
    const boundary = guardrailStopRates(1000, 33, guardrailScenario(H, H, 1, plan));
    console.info({
      power: `${formatRate(power.always_valid.stops)}, at ${formatStopFraction(power.always_valid)} of the sample on average`,
      aa: formatRate(aa.always_valid.stops),
      boundary: formatRate(boundary.always_valid.stops),
    });
    expect(power.always_valid.stops.rate).toBeGreaterThanOrEqual(0.8);
    expect(aa.always_valid.stops.rate).toBeLessThanOrEqual(0.05);
    expect(boundary.always_valid.stops.rate).toBeLessThanOrEqual(0.05);
  });
});
