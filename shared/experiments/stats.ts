// Experiment statistics as PostHog computes them for ExperimentMetric (spec A5–A8): per-variant
// mean or proportion, relative effect with delta-method variance, then either the closed-form
// Bayesian chance to win (flat prior) or a two-sided Welch t-test. Each variant vs the baseline.

export interface VariantStats {
  key: string;
  number_of_samples: number;
  sum: number;
  sum_squares: number;
  step_counts?: number[];
}

export type MetricKind = 'mean' | 'funnel';

export const MIN_EXPOSURES = 50;

// ---- numerical helpers ----
/** erf, W. J. Cody-style rational approximation via erfc (|error| < 1.2e-7). */
function erfc(x: number): number {
  const z = Math.abs(x);
  const t = 1 / (1 + 0.5 * z);
  const r =
    t *
    Math.exp(
      -z * z -
        1.26551223 +
        t *
          (1.00002368 +
            t *
              (0.37409196 +
                t *
                  (0.09678418 +
                    t *
                      (-0.18628806 +
                        t *
                          (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))),
    );
  return x >= 0 ? r : 2 - r;
}

export const normalCdf = (x: number) => 0.5 * erfc(-x / Math.SQRT2);

/** Inverse of the standard normal CDF (Acklam's algorithm, relative error < 1.2e-9). */
export function normalQuantile(p: number): number {
  if (p <= 0 || p >= 1) throw new RangeError('p must be in (0, 1)');
  const a = [
    -39.69683028665376, 220.9460984245205, -275.9285104469687, 138.357751867269, -30.66479806614716, 2.506628277459239,
  ];
  const b = [-54.47609879822406, 161.5858368580409, -155.6989798598866, 66.80131188771972, -13.28068155288572];
  const c = [
    -0.007784894002430293, -0.3223964580411365, -2.400758277161838, -2.549732539343734, 4.374664141464968,
    2.938163982698783,
  ];
  const d = [0.007784695709041462, 0.3224671290700398, 2.445134137142996, 3.754408661907416];
  const low = 0.02425;
  if (p < low) {
    const q = Math.sqrt(-2 * Math.log(p));
    return (
      (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
      ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1)
    );
  }
  if (p > 1 - low) return -normalQuantile(1 - p);
  const q = p - 0.5;
  const r = q * q;
  return (
    ((((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q) /
    (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1)
  );
}

function logGamma(x: number): number {
  // Lanczos coefficients (Numerical Recipes); -86.50532032941678 there is the same double as below.
  const g = [
    76.18009172947146, -86.50532032941678, 24.01409824083091, -1.231739572450155, 0.1208650973866179e-2,
    -0.5395239384953e-5,
  ];
  let y = x;
  const tmp = x + 5.5 - (x + 0.5) * Math.log(x + 5.5);
  let ser = 1.000000000190015;
  for (const coef of g) ser += coef / ++y;
  // biome-ignore lint/correctness/noPrecisionLoss: the published constant, as written
  return -tmp + Math.log((2.5066282746310005 * ser) / x);
}

/** Regularized incomplete beta I_x(a, b) (continued fraction, Numerical Recipes). */
function incompleteBeta(x: number, a: number, b: number): number {
  if (x <= 0) return 0;
  if (x >= 1) return 1;
  const front = Math.exp(logGamma(a + b) - logGamma(a) - logGamma(b) + a * Math.log(x) + b * Math.log(1 - x));
  const cf = (x: number, a: number, b: number) => {
    let c = 1;
    let d = 1 - ((a + b) * x) / (a + 1);
    if (Math.abs(d) < 1e-300) d = 1e-300;
    d = 1 / d;
    let h = d;
    for (let m = 1; m <= 300; m++) {
      const m2 = 2 * m;
      let aa = (m * (b - m) * x) / ((a + m2 - 1) * (a + m2));
      d = 1 + aa * d;
      c = 1 + aa / c;
      d = 1 / (Math.abs(d) < 1e-300 ? 1e-300 : d);
      h *= d * (Math.abs(c) < 1e-300 ? 1e-300 : c);
      aa = (-(a + m) * (a + b + m) * x) / ((a + m2) * (a + m2 + 1));
      d = 1 + aa * d;
      c = 1 + aa / c;
      d = 1 / (Math.abs(d) < 1e-300 ? 1e-300 : d);
      const del = d * (Math.abs(c) < 1e-300 ? 1e-300 : c);
      h *= del;
      if (Math.abs(del - 1) < 1e-12) break;
    }
    return h;
  };
  return x < (a + 1) / (a + b + 2) ? (front * cf(x, a, b)) / a : 1 - (front * cf(1 - x, b, a)) / b;
}

/** CDF of Student's t with `df` degrees of freedom. */
export function studentTCdf(t: number, df: number): number {
  const tail = 0.5 * incompleteBeta(df / (df + t * t), df / 2, 0.5);
  return t >= 0 ? 1 - tail : tail;
}

export function studentTQuantile(p: number, df: number): number {
  let lo = -1e3;
  let hi = 1e3;
  for (let i = 0; i < 200; i++) {
    const mid = (lo + hi) / 2;
    if (studentTCdf(mid, df) < p) lo = mid;
    else hi = mid;
  }
  return (lo + hi) / 2;
}

// ---- statistics ----
interface Moments {
  n: number;
  mean: number;
  variance: number;
}

function moments(v: VariantStats, kind: MetricKind): Moments {
  const n = v.number_of_samples;
  if (kind === 'funnel') {
    const p = v.sum / n;
    return { n, mean: p, variance: p * (1 - p) };
  }
  const mean = v.sum / n;
  const variance = n > 1 ? (v.sum_squares - (v.sum * v.sum) / n) / (n - 1) : 0;
  return { n, mean, variance: Math.max(variance, 0) };
}

/** Relative effect θ = (μT − μC)/μC and its delta-method variance. */
function relativeEffect(t: Moments, c: Moments) {
  const theta = (t.mean - c.mean) / c.mean;
  const variance = t.variance / (t.n * c.mean ** 2) + (t.mean ** 2 * c.variance) / (c.n * c.mean ** 4);
  return { theta, variance };
}

export function validationFailures(v: VariantStats, kind: MetricKind, isBaseline: boolean): string[] {
  const failures: string[] = [];
  if (v.number_of_samples < MIN_EXPOSURES) failures.push('NOT_ENOUGH_EXPOSURES');
  if (kind === 'funnel' && v.sum < 5) failures.push('NOT_ENOUGH_METRIC_DATA');
  if (isBaseline && v.sum === 0) failures.push('BASELINE_MEAN_IS_ZERO');
  return failures;
}

export interface ExperimentResult {
  baseline: VariantStats & { validation_failures: string[] };
  variant_results: Record<string, unknown>[];
}

/** Compares every variant with the baseline, by `method` (bayesian: chance to win; frequentist: p-value). */
export function compareVariants(
  variants: VariantStats[],
  baselineKey: string,
  kind: MetricKind,
  method: 'bayesian' | 'frequentist',
  level = 0.95,
): ExperimentResult {
  const baseline = variants.find((v) => v.key === baselineKey) ?? variants[0];
  const baselineFailures = validationFailures(baseline, kind, true);
  const results = variants
    .filter((v) => v !== baseline)
    .map((v) => {
      const failures = validationFailures(v, kind, false);
      const base = { ...v, method, validation_failures: failures };
      const empty =
        method === 'bayesian'
          ? { chance_to_win: null, credible_interval: null, significant: null }
          : { p_value: null, confidence_interval: null, significant: null };
      if (failures.length || baselineFailures.length) return { ...base, ...empty };
      const c = moments(baseline, kind);
      const t = moments(v, kind);
      if (!(c.mean > 0)) return { ...base, ...empty };
      const { theta, variance } = relativeEffect(t, c);
      if (!(variance > 0) || !Number.isFinite(variance)) return { ...base, ...empty };
      const sd = Math.sqrt(variance);
      if (method === 'bayesian') {
        const chance = normalCdf(theta / sd);
        const z = normalQuantile(1 - (1 - level) / 2);
        return {
          ...base,
          chance_to_win: chance,
          credible_interval: [theta - z * sd, theta + z * sd],
          significant: chance > level || chance < 1 - level,
        };
      }
      const a = t.variance / t.n;
      const b = c.variance / c.n;
      const df = (a + b) ** 2 / (a ** 2 / (t.n - 1) + b ** 2 / (c.n - 1));
      const tStat = theta / sd;
      const p = 2 * (1 - studentTCdf(Math.abs(tStat), df));
      const alpha = 1 - level;
      const q = studentTQuantile(1 - alpha / 2, df);
      return { ...base, p_value: p, confidence_interval: [theta - q * sd, theta + q * sd], significant: p < alpha };
    });
  return { baseline: { ...baseline, validation_failures: baselineFailures }, variant_results: results };
}
