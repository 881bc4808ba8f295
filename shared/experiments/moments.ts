// A variant's counts as the results store them, and the mean and variance both engines (fixed-horizon
// and sequential, ./stats.ts and ./sequential.ts) start from.
export interface VariantStats {
  key: string;
  number_of_samples: number;
  sum: number;
  sum_squares: number;
  step_counts?: number[];
  /** CUPED: Σx, Σx² and Σxy of the pre-exposure covariate x (the metric before exposure). */
  covariate_sum?: number;
  covariate_sum_squares?: number;
  covariate_sum_product?: number;
  /** Ratio metrics: Σd, Σd² of the persons' denominators and Σm·d (the numerator is sum, sum_squares). */
  denominator_sum?: number;
  denominator_sum_squares?: number;
  numerator_denominator_sum_product?: number;
}

/** (A retention metric is a ratio of 0/1 per starter to 1 per starter: see retention-metric.ts.) */
export type MetricKind = 'mean' | 'funnel' | 'ratio' | 'retention';

export interface Moments {
  n: number;
  mean: number;
  variance: number;
}

export function moments(v: VariantStats, kind: MetricKind): Moments {
  const n = v.number_of_samples;
  if (kind === 'funnel') {
    const p = v.sum / n;
    return { n, mean: p, variance: p * (1 - p) };
  }
  const mean = v.sum / n;
  const variance = n > 1 ? (v.sum_squares - (v.sum * v.sum) / n) / (n - 1) : 0;
  if (kind === 'ratio' || kind === 'retention') return ratioMoments(v, mean, Math.max(variance, 0));
  return { n, mean, variance: Math.max(variance, 0) };
}

/**
 * A ratio metric's Σm/Σd and the per-person variance of its delta-method linearisation (PostHog's
 * RatioStatistic): s²m/d̄² + m̄²·s²d/d̄⁴ − 2m̄·cov(m, d)/d̄³, so that variance/n is the ratio's
 * squared standard error, as a mean's is.
 */
function ratioMoments(v: VariantStats, m: number, varM: number): Moments {
  const n = v.number_of_samples;
  const sumD = v.denominator_sum ?? 0;
  const d = sumD / n;
  const varD = n > 1 ? Math.max(((v.denominator_sum_squares ?? 0) - (sumD * sumD) / n) / (n - 1), 0) : 0;
  const cov = n > 1 ? ((v.numerator_denominator_sum_product ?? 0) - (v.sum * sumD) / n) / (n - 1) : 0;
  const variance = varM / d ** 2 + (m ** 2 * varD) / d ** 4 - (2 * m * cov) / d ** 3;
  return { n, mean: v.sum / sumD, variance: Number.isFinite(variance) ? Math.max(variance, 0) : Number.NaN };
}
