// Always-valid (sequential) inference for guardrails: an interval that may be looked at after every
// new batch of data, as often as we like, and still covers the true effect at every look at once with
// probability ≥ 1 − α. A fixed-horizon 95% interval checked every 5 minutes would not: by chance it
// excludes the truth at some look far more often than 5% of the time.
//
// The normal-mixture confidence sequence (Robbins 1970; Johari, Pekelis & Walsh, "Always valid
// inference", 2017/2022, the mSPRT; Howard et al., "Time-uniform, nonparametric, nonasymptotic
// confidence sequences", 2021). With an estimate θ̂ of θ whose variance is V (shrinking as data
// arrive), the mixture likelihood ratio of H0: θ = θ0 against alternatives θ ~ N(θ0, τ²) is
//
//   Λ(θ0) = sqrt(V / (V + τ²)) · exp( τ² (θ̂ − θ0)² / (2 V (V + τ²)) ),
//
// a nonnegative martingale under H0, so by Ville's inequality P(∃ look: Λ ≥ 1/α) ≤ α. The values θ0
// not rejected form the interval
//
//   θ̂ ± sqrt( V (V + τ²) / τ² · ( 2 ln(1/α) + ln((V + τ²) / V) ) ).
//
// τ is the scale of the effects the sequence is tuned to detect (its width is smallest when V is
// about τ²·(something of order 1)); guardrails use their tolerated harm. θ here is the relative
// effect (μT − μC)/μC with the delta-method variance (as stats.ts uses for the fixed-horizon test),
// so validity is asymptotic in the exposures, which is why guardrails also ask a minimum count.
import { type MetricKind, moments, type VariantStats } from './stats.ts';

export interface SequentialInterval {
  estimate: number;
  variance: number;
  lower: number;
  upper: number;
}

/** The normal-mixture confidence sequence's interval at one look (formula above). */
export function alwaysValidInterval(estimate: number, variance: number, tau: number, alpha = 0.05): SequentialInterval {
  if (!(variance > 0) || !(tau > 0) || !(alpha > 0 && alpha < 1)) {
    return { estimate, variance, lower: Number.NEGATIVE_INFINITY, upper: Number.POSITIVE_INFINITY };
  }
  const t2 = tau * tau;
  const half = Math.sqrt(
    ((variance * (variance + t2)) / t2) * (2 * Math.log(1 / alpha) + Math.log((variance + t2) / variance)),
  );
  return { estimate, variance, lower: estimate - half, upper: estimate + half };
}

/** The mixture likelihood ratio Λ(θ0) (formula above): θ0 lies outside the interval iff Λ ≥ 1/α. */
export function mixtureLikelihoodRatio(estimate: number, variance: number, tau: number, theta0: number): number {
  const t2 = tau * tau;
  return (
    Math.sqrt(variance / (variance + t2)) * Math.exp((t2 * (estimate - theta0) ** 2) / (2 * variance * (variance + t2)))
  );
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
