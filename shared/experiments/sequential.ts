// Sequential testing for the frequentist engine: always-valid p-values and confidence sequences,
// so results can be read every day (or at any moment) without inflating false positives.
//
// PostHog added opt-in sequential testing for two-sided frequentist metrics in PR #60879 (June
// 2026), citing Waudby-Smith et al., "Time-uniform central limit theory and asymptotic confidence
// sequences" (arXiv:2103.06476). Its code is not in the PostHog source we can read (the stored
// products/experiments/stats/frequentist/ — method.py, tests.py, utils.py, enums.py — its tests,
// posthog/hogql_queries/experiments/ with test/test_stats_config.py, and ee/clickhouse/queries/
// experiments/ predate it), so this is the method that paper gives, checked against closed-form values and an
// independent second formula (Johari et al.'s mSPRT) in test/shared/experiments/experiments-sequential.test.ts.
//
// The asymptotic confidence sequence (the paper's two-sided Gaussian-mixture boundary): after N
// observations (here the exposures of both arms) with an estimate θ̂ of variance V = s²/N,
//   θ̂ ± sqrt( V · 2(Nρ² + 1)/(Nρ²) · ln( sqrt(Nρ² + 1) / α ) )
// covers θ at every N at once with probability ≥ 1 − α (asymptotically). ρ² is the mixing
// variance of the normal mixture, in units of the per-observation variance (Johari et al.'s τ² is
// ρ²·s²); the boundary is tightest around N* = (−2 ln α + ln(1 − 2 ln α))/ρ², so ρ is set from N*,
// the `tuning_parameter` (the expected total sample size; GrowthBook's name and default, 5000).
// The always-valid p-value is 1/E, E = exp(Nρ²·z²/(2(Nρ² + 1)))/sqrt(Nρ² + 1) the mixture
// martingale at z = θ̂/sqrt(V): p < α exactly when the sequence at level α excludes 0.

import { type MetricKind, moments, type VariantStats } from './moments.ts';

export const SEQUENTIAL_DEFAULT_TUNING = 5000;
export const SEQUENTIAL_METHOD = 'asymptotic_confidence_sequence' as const;

export interface SequentialConfig {
  /** N*: the total exposures (all arms) at which the confidence sequence is tightest. */
  tuning_parameter: number;
}

/** ρ² for a boundary tightest at N* total observations, at level α. */
export function sequentialRho2(alpha: number, tuning: number): number {
  const l = -2 * Math.log(alpha);
  return (l + Math.log(1 + l)) / tuning;
}

/** Half-width of the level-α confidence sequence for an estimate of variance `variance` after `n` observations. */
export function confidenceSequenceHalfWidth(variance: number, n: number, rho2: number, alpha: number): number {
  const nr = n * rho2;
  return Math.sqrt(((variance * 2 * (nr + 1)) / nr) * Math.log(Math.sqrt(nr + 1) / alpha));
}

/** The always-valid p-value min(1, 1/E) of an estimate θ̂ (null θ = 0) of variance `variance` after `n` observations. */
export function alwaysValidPValue(theta: number, variance: number, n: number, rho2: number): number {
  const nr = n * rho2;
  const logE = (nr * theta * theta) / (2 * variance * (nr + 1)) - 0.5 * Math.log(nr + 1);
  return Math.min(1, Math.exp(-logE));
}

/** The sequential testing chosen in an experiment's stats_config (validated by the API), or null when off. */
export function sequentialConfig(statsConfig: unknown): SequentialConfig | null {
  const s = (statsConfig as { sequential?: { enabled?: unknown; tuning_parameter?: unknown } } | null)?.sequential;
  if (!s || typeof s !== 'object' || s.enabled !== true) return null;
  const n = s.tuning_parameter;
  return { tuning_parameter: typeof n === 'number' && n >= 1 ? n : SEQUENTIAL_DEFAULT_TUNING };
}

/** The metric types sequential testing applies to (the ones the engine computes: mean and funnel). */
export const SEQUENTIAL_METRIC_TYPES = ['mean', 'funnel'];

// Guardrails (shared/experiments/guardrails.ts) read the same confidence sequence in Johari et al.'s
// parametrisation: τ, the scale of the effects it is tuned to (their tolerated harm), with
// Nρ² = τ²/V. Then the interval is θ̂ ± sqrt(V (V + τ²)/τ² · (2 ln(1/α) + ln((V + τ²)/V))) and the
// mixture likelihood ratio of θ0 is Λ(θ0) = sqrt(V/(V + τ²)) · exp(τ²(θ̂ − θ0)²/(2V(V + τ²))): a
// nonnegative martingale under θ0, so by Ville's inequality P(∃ look: Λ ≥ 1/α) ≤ α, and θ0 lies
// outside the interval exactly when Λ(θ0) ≥ 1/α.

export interface SequentialInterval {
  estimate: number;
  variance: number;
  lower: number;
  upper: number;
}

/** The level-α confidence sequence at one look, tuned to effects of scale `tau` (formula above). */
export function alwaysValidInterval(estimate: number, variance: number, tau: number, alpha = 0.05): SequentialInterval {
  if (!(variance > 0) || !(tau > 0) || !(alpha > 0 && alpha < 1)) {
    return { estimate, variance, lower: Number.NEGATIVE_INFINITY, upper: Number.POSITIVE_INFINITY };
  }
  const half = confidenceSequenceHalfWidth(variance, 1, (tau * tau) / variance, alpha);
  return { estimate, variance, lower: estimate - half, upper: estimate + half };
}

/** The mixture likelihood ratio Λ(θ0) (formula above): the inverse of the always-valid p-value of θ̂ − θ0. */
export function mixtureLikelihoodRatio(estimate: number, variance: number, tau: number, theta0: number): number {
  const nr = (tau * tau) / variance;
  return Math.exp((nr * (estimate - theta0) ** 2) / (2 * variance * (nr + 1)) - 0.5 * Math.log(nr + 1));
}

/**
 * The relative effect of `treatment` over `control`, θ = μT/μC − 1, and its delta-method variance
 * Var(θ̂) ≈ s²T/(nT μC²) + μT² s²C/(nC μC⁴); null when it is not defined (no samples, or μC = 0).
 */
export function relativeEffectEstimate(
  treatment: VariantStats,
  control: VariantStats,
  kind: MetricKind,
): { estimate: number; variance: number } | null {
  if (treatment.number_of_samples < 2 || control.number_of_samples < 2) return null;
  const t = moments(treatment, kind);
  const c = moments(control, kind);
  if (c.mean === 0) return null;
  const variance = t.variance / (t.n * c.mean ** 2) + (t.mean ** 2 * c.variance) / (c.n * c.mean ** 4);
  return { estimate: t.mean / c.mean - 1, variance };
}
