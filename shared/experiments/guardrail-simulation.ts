// The circuit breaker's error rates by simulation: seeded experiments whose guardrail is checked at
// every look with the real decision of ./guardrails.ts (evaluateGuardrail: the always-valid interval
// of ./sequential.ts and `beyondTolerance`), as the worker does every 5 minutes. Pure functions; the
// suites are test/shared/experiments/guardrail-simulation.test.ts (fast) and bench/guardrail-simulation.ts (large).
//
// The look schedule: 14 days checked every 5 minutes (288 looks a day, 4,032 in all), the worker's
// GUARDRAIL_CHECK_CRON, with the planned exposures spread evenly over them. Each check sees the
// cumulative counts at that moment, so the simulation reads the same sequence of estimates. One
// simplification: a person's metric value is drawn whole at exposure (the worker's counts also grow
// as exposed persons keep converting); the statistics read at each look are the same kind.
//
// What "false stop" means: the breaker's null hypothesis is "the harm is at most the tolerated h".
// Under A/A (no harm) a trip needs the interval to exclude h > 0, rarer than excluding 0; the worst
// case of the null is a true harm of exactly h, where a trip means the interval excluded the true
// effect on one side at some look: by Ville's inequality at most α = 5% over any number of looks. A
// fixed-horizon interval θ̂ ± z·√V checked as often has no such bound: its false-stop rate grows with
// the number of looks (the control rule below, which shows the harness can see a failure).
import {
  beyondTolerance,
  DEFAULT_GUARDRAIL_MIN_EXPOSURES,
  evaluateGuardrail,
  GUARDRAIL_ALPHA,
  type GuardrailDirection,
  guardrailPlannedSamplePerArm,
} from './guardrails.ts';
import { relativeEffectEstimate } from './sequential.ts';
import { type Rate, rateOf, type SimulatedMetric, seededRng, simulateLooks } from './simulation.ts';
import { normalQuantile } from './stats.ts';

export const GUARDRAIL_SIM_DAYS = 14;
/** One check every 5 minutes (the default GUARDRAIL_CHECK_CRON). */
export const GUARDRAIL_SIM_LOOKS_PER_DAY = 288;

export interface GuardrailScenario {
  metric: SimulatedMetric;
  direction: GuardrailDirection;
  /** The guardrail's tolerated_harm h. */
  toleratedHarm: number;
  /** The treatment's true relative change in the bad direction: 0 = A/A, h = the null's boundary. */
  harm: number;
  /** Exposures per arm over the planned duration (the planned sample). */
  plannedPerArm: number;
  /** The guardrail knows the planned sample (its interval tuned to it, guardrailTau); else τ = h. */
  tunedToPlan?: boolean;
  days?: number;
  looksPerDay?: number;
  minExposures?: number;
}

/** The two guardrail metrics of the suites: a conversion that must not fall, a per-user mean that must not rise. */
export const GUARDRAIL_METRICS: { metric: SimulatedMetric; direction: GuardrailDirection }[] = [
  { metric: { kind: 'funnel', rate: 0.2 }, direction: 'decrease_is_bad' },
  { metric: { kind: 'mean', mean: 10, sd: 6 }, direction: 'increase_is_bad' },
];

/** The delta-method variance of the relative effect per unit (times 1/n per arm) with a relative change δ. */
function unitVariance(metric: SimulatedMetric, delta: number): number {
  if (metric.kind === 'funnel') {
    const p = metric.rate;
    const q = p * (1 + delta);
    return (q * (1 - q)) / p ** 2 + (q ** 2 * p * (1 - p)) / p ** 4;
  }
  const cv2 = (metric.sd / metric.mean) ** 2;
  return cv2 * (1 + (1 + delta) ** 2);
}

/**
 * The sample per arm a fixed-horizon two-sided test at α = 0.05 needs to detect a relative change δ
 * with 80% power: (z₀.₉₇₅ + z₀.₈)² · V₁/δ² (what a sample-size calculator plans).
 */
export function fixedHorizonSamplePerArm(metric: SimulatedMetric, delta: number, alpha = 0.05, power = 0.8): number {
  const z = normalQuantile(1 - alpha / 2) + normalQuantile(power);
  return Math.ceil((z * z * unitVariance(metric, Math.abs(delta))) / (delta * delta));
}

/** The breaker's planned sample per arm for stopping a harm δ in 80% of runs (guardrailPlannedSamplePerArm). */
export function breakerSamplePerArm(metric: SimulatedMetric, harm: number, toleratedHarm: number): number {
  return guardrailPlannedSamplePerArm(unitVariance(metric, harm), harm, toleratedHarm);
}

export type GuardrailRule = 'always_valid' | 'fixed_horizon';

export interface GuardrailRuns {
  /** Share of experiments stopped within the planned sample. */
  stops: Rate;
  /** Mean share of the planned sample seen when stopped (stopped experiments only). */
  meanStopFraction: number;
}

/**
 * `experiments` seeded experiments (control and one treatment changed by `harm` in the bad
 * direction), each guardrail checked at every look by each rule until it trips or the planned sample
 * is reached. `always_valid` is the breaker's real decision (evaluateGuardrail); `fixed_horizon`
 * the same rule on the naive interval θ̂ ± z₀.₉₇₅·√V (the control).
 */
export function guardrailStopRates(
  experiments: number,
  seed: number,
  scenario: (index: number) => GuardrailScenario,
  rules: readonly GuardrailRule[] = ['always_valid'],
): Record<GuardrailRule, GuardrailRuns> {
  const rng = seededRng(seed);
  const z = normalQuantile(1 - GUARDRAIL_ALPHA / 2);
  const stops = { always_valid: 0, fixed_horizon: 0 };
  const fractions = { always_valid: 0, fixed_horizon: 0 };
  for (let e = 0; e < experiments; e++) {
    const s = scenario(e);
    const days = s.days ?? GUARDRAIL_SIM_DAYS;
    const looks = days * (s.looksPerDay ?? GUARDRAIL_SIM_LOOKS_PER_DAY);
    const guardrail = {
      metric_uuid: 'guardrail',
      direction: s.direction,
      tolerated_harm: s.toleratedHarm,
      min_exposures: s.minExposures,
    };
    const lift = s.direction === 'increase_is_bad' ? s.harm : -s.harm;
    const pending = new Set<GuardrailRule>(rules);
    simulateLooks(
      rng,
      {
        variants: [
          { key: 'control', usersPerDay: s.plannedPerArm / days },
          { key: 'test', usersPerDay: s.plannedPerArm / days, lift: [lift] },
        ],
        metrics: [s.metric],
        days,
        looksPerDay: s.looksPerDay ?? GUARDRAIL_SIM_LOOKS_PER_DAY,
      },
      ([stats], index) => {
        for (const rule of pending) {
          let tripped: boolean;
          if (rule === 'always_valid') {
            const planned = s.tunedToPlan ? s.plannedPerArm : null;
            const [check] = evaluateGuardrail(
              guardrail,
              stats.kind,
              stats.variants,
              'control',
              GUARDRAIL_ALPHA,
              planned,
            );
            tripped = check.status === 'harmful';
          } else {
            const [control, test] = stats.variants;
            const effect = relativeEffectEstimate(test, control, stats.kind);
            const minimum = s.minExposures ?? DEFAULT_GUARDRAIL_MIN_EXPOSURES;
            tripped =
              !!effect &&
              effect.variance > 0 &&
              control.number_of_samples >= minimum &&
              test.number_of_samples >= minimum &&
              beyondTolerance(s.direction, s.toleratedHarm, [
                effect.estimate - z * Math.sqrt(effect.variance),
                effect.estimate + z * Math.sqrt(effect.variance),
              ]);
          }
          if (tripped) {
            stops[rule]++;
            fractions[rule] += (index + 1) / looks;
            pending.delete(rule);
          }
        }
        return pending.size === 0;
      },
    );
  }
  const runs = (rule: GuardrailRule) => ({
    stops: rateOf(stops[rule], experiments),
    meanStopFraction: stops[rule] ? fractions[rule] / stops[rule] : 0,
  });
  return { always_valid: runs('always_valid'), fixed_horizon: runs('fixed_horizon') };
}

/** The harm the README's power figure is about: a 5% relative change in the bad direction. */
export const GUARDRAIL_HARM = 0.05;

/**
 * A scenario per experiment, alternating `metrics`: tolerated harm h, a true harm `harm`, and a
 * planned sample of `multiple` × a sample per arm for a 5% harm on that metric: with `plan`
 * 'fixed_horizon' (the default) n₈₀, what a fixed-horizon calculator plans (80% power, α = 0.05),
 * and the guardrail does not know it (τ = h); with 'breaker' the breaker's own planned sample
 * (breakerSamplePerArm, for h), which the guardrail knows (its interval tuned to it). Checked every
 * 5 minutes over 14 days unless `looksPerDay` says otherwise.
 */
export const guardrailScenario =
  (
    toleratedHarm: number,
    harm: number,
    multiple: number,
    options: { metrics?: typeof GUARDRAIL_METRICS; looksPerDay?: number; plan?: 'fixed_horizon' | 'breaker' } = {},
  ) =>
  (index: number): GuardrailScenario => {
    const metrics = options.metrics ?? GUARDRAIL_METRICS;
    const { metric, direction } = metrics[index % metrics.length];
    const breaker = options.plan === 'breaker';
    const unit = breaker
      ? breakerSamplePerArm(metric, GUARDRAIL_HARM, toleratedHarm)
      : fixedHorizonSamplePerArm(metric, GUARDRAIL_HARM);
    return {
      metric,
      direction,
      toleratedHarm,
      harm,
      plannedPerArm: Math.round(multiple * unit),
      tunedToPlan: breaker,
      looksPerDay: options.looksPerDay,
    };
  };

/** The mean share of the planned sample seen at a stop, as a percentage ("62%"). */
export const formatStopFraction = (r: GuardrailRuns) => `${Math.round(100 * r.meanStopFraction)}%`;
