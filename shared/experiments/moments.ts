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
}

export type MetricKind = 'mean' | 'funnel';

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
  return { n, mean, variance: Math.max(variance, 0) };
}
