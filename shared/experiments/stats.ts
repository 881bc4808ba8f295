// Experiment statistics as PostHog computes them for ExperimentMetric (spec A5–A8): per-variant
// mean or proportion, relative effect with delta-method variance, then either the closed-form
// Bayesian chance to win (flat prior) or a two-sided Welch t-test — or, with sequential testing, an
// always-valid p-value and confidence sequence (./sequential.ts). Each variant vs the baseline.
import {
  alwaysValidPValue,
  confidenceSequenceHalfWidth,
  SEQUENTIAL_METHOD,
  type SequentialConfig,
  sequentialRho2,
} from './sequential.ts';
import { type MetricKind, type Moments, moments, type VariantStats } from './moments.ts';

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

/** Density of Student's t with `df` degrees of freedom. */
function studentTPdf(t: number, df: number): number {
  const logC = logGamma((df + 1) / 2) - logGamma(df / 2) - 0.5 * Math.log(df * Math.PI);
  return Math.exp(logC - ((df + 1) / 2) * Math.log(1 + (t * t) / df));
}

/** Quantile of Student's t: Newton's method from the normal quantile, bisection if it strays. */
export function studentTQuantile(p: number, df: number): number {
  let x = normalQuantile(p);
  for (let i = 0; i < 50; i++) {
    const step = (studentTCdf(x, df) - p) / studentTPdf(x, df);
    if (!Number.isFinite(step)) break;
    x -= step;
    if (Math.abs(step) < 1e-12 * Math.max(1, Math.abs(x))) return x;
  }
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
/** Relative effect θ = (μT − μC)/μC and its delta-method variance s²T/(nT μC²) + μT² s²C/(nC μC⁴). */
function relativeEffect(t: Moments, c: Moments) {
  const u = c.mean;
  const theta = (t.mean - c.mean) / u;
  const variance = t.variance / (t.n * u ** 2) + (t.mean ** 2 * c.variance) / (c.n * u ** 4);
  return { theta, variance };
}

/**
 * With CUPED: θ = (adjT − adjC)/ȳC, the adjusted difference over the unadjusted control mean (as
 * PostHog divides it), and its delta-method variance. adjC = ȳC − θc·x̄C and ȳC come from the same
 * control persons, so their covariance, s²y − θc·cov(x, y) per person, enters:
 *   V = s²T,adj/(nT ȳC²) + (s²C,adj + θ²·s²y,C + 2θ·(s²y,C − θc·covC))/(nC ȳC²).
 * Without adjustment (θc = 0) this is relativeEffect's formula. PostHog's (and this engine's until
 * 2026-11-29) is relativeEffect's on the adjusted moments: the control's term scaled by (adjT/ȳC)²,
 * about 1 in an A/A test here; but adjT = ȳT − θc·x̄T (x̄ not centred) is far below ȳT when the
 * covariate is strong, so most of the control's variance is dropped: A/A experiments came out
 * significant in 13.5% (mean) and 14.7% (funnel) of runs at α = 0.05, intervals covering the true
 * effect in 84–87% (./error-rates.ts, 10,000 runs each). On PostHog's golden case (θc ≈ −0.07, an
 * effect of −29%) the interval's ends differ from PostHog's by 0.005.
 */
function cupedRelativeEffect(t: Moments, c: Moments, control: Moments, covariance: number, thetaC: number) {
  const u = control.mean;
  const theta = (t.mean - c.mean) / u;
  const controlTerm = c.variance + theta ** 2 * control.variance + 2 * theta * (control.variance - thetaC * covariance);
  const variance = t.variance / (t.n * u ** 2) + Math.max(controlTerm, 0) / (c.n * u ** 2);
  return { theta, variance };
}

// ---- CUPED (PostHog's products/experiments/stats/shared/cuped.py, after Deng et al. 2013) ----
const CUPED_VARIANCE_FLOOR = 1e-10;

const hasCovariate = (v: VariantStats) =>
  typeof v.covariate_sum === 'number' &&
  typeof v.covariate_sum_squares === 'number' &&
  typeof v.covariate_sum_product === 'number';

/** θc = pooled Cov(y, x) / pooled Var(x) over a treatment and the control (0 if Var(x) < 1e-10). */
export function cupedTheta(t: VariantStats, c: VariantStats): number {
  const n = t.number_of_samples + c.number_of_samples;
  if (n <= 1) return 0;
  const sx = (t.covariate_sum ?? 0) + (c.covariate_sum ?? 0);
  const sxx = (t.covariate_sum_squares ?? 0) + (c.covariate_sum_squares ?? 0);
  const sxy = (t.covariate_sum_product ?? 0) + (c.covariate_sum_product ?? 0);
  const sy = t.sum + c.sum;
  const varX = (sxx - (sx * sx) / n) / (n - 1);
  if (varX < CUPED_VARIANCE_FLOOR) return 0;
  return (sxy - (sy * sx) / n) / (n - 1) / varX;
}

/** The sample covariance of the metric and its covariate within a group, cov(y, x) (n − 1). */
function covariateCovariance(v: VariantStats): number {
  const n = v.number_of_samples;
  return n > 1 ? ((v.covariate_sum_product ?? 0) - (v.sum * (v.covariate_sum ?? 0)) / n) / (n - 1) : 0;
}

/** A group's moments adjusted by θc: mean ȳ − θc·x̄, variance s²y + θc²·s²x − 2θc·cov(y, x) (floored). */
export function cupedAdjust(v: VariantStats, kind: MetricKind, thetaC: number): Moments {
  const y = moments(v, kind);
  const n = v.number_of_samples;
  const sx = v.covariate_sum ?? 0;
  const x = moments({ key: v.key, number_of_samples: n, sum: sx, sum_squares: v.covariate_sum_squares ?? 0 }, 'mean');
  const cov = covariateCovariance(v);
  const variance = y.variance + thetaC ** 2 * x.variance - 2 * thetaC * cov;
  // A single observation has no variance, as PostHog's synthetic statistic gives.
  return { n, mean: y.mean - thetaC * x.mean, variance: n > 1 ? Math.max(variance, CUPED_VARIANCE_FLOOR) : 0 };
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

export interface CompareOptions {
  /** Two-sided significance level of the frequentist test (default 0.05; Bayesian: 1 − ci_level). */
  alpha?: number;
  /** Per-variant significance level (a multiple-comparison correction's share), in place of `alpha`. */
  variantAlphas?: Record<string, number>;
  /**
   * Sequential testing (frequentist): always-valid p-values and confidence sequences, ρ set from
   * the tuning parameter at `alpha` (the same ρ at every variant's alpha, so each interval excludes
   * 0 exactly when its p-value is below that alpha).
   */
  sequential?: SequentialConfig | null;
}

/** Compares every variant with the baseline, by `method` (bayesian: chance to win; frequentist: p-value). */
export function compareVariants(
  variants: VariantStats[],
  baselineKey: string,
  kind: MetricKind,
  method: 'bayesian' | 'frequentist',
  options: CompareOptions = {},
): ExperimentResult {
  const baseline = variants.find((v) => v.key === baselineKey) ?? variants[0];
  const baselineFailures = validationFailures(baseline, kind, true);
  const level = 1 - (options.alpha ?? 0.05);
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
      // CUPED when both groups carry the covariate: θc from this pair, the relative effect over the
      // unadjusted control mean.
      const cuped = hasCovariate(v) && hasCovariate(baseline);
      const thetaC = cuped ? cupedTheta(v, baseline) : 0;
      const c = cuped ? cupedAdjust(baseline, kind, thetaC) : moments(baseline, kind);
      const t = cuped ? cupedAdjust(v, kind, thetaC) : moments(v, kind);
      const control = moments(baseline, kind);
      if (!(control.mean > 0)) return { ...base, ...empty };
      const { theta, variance } = cuped
        ? cupedRelativeEffect(t, c, control, covariateCovariance(baseline), thetaC)
        : relativeEffect(t, c);
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
      const alpha = options.variantAlphas?.[v.key] ?? 1 - level;
      if (options.sequential) {
        const n = t.n + c.n;
        const rho2 = sequentialRho2(1 - level, options.sequential.tuning_parameter);
        const w = confidenceSequenceHalfWidth(variance, n, rho2, alpha);
        const [lo, hi] = [theta - w, theta + w];
        return {
          ...base,
          p_value: alwaysValidPValue(theta, variance, n, rho2),
          confidence_interval: [lo, hi],
          // From the interval shown, so the label never disagrees with it.
          significant: lo > 0 || hi < 0,
        };
      }
      const a = t.variance / t.n;
      const b = c.variance / c.n;
      const df = (a + b) ** 2 / (a ** 2 / (t.n - 1) + b ** 2 / (c.n - 1));
      const tStat = theta / sd;
      const p = 2 * (1 - studentTCdf(Math.abs(tStat), df));
      const q = studentTQuantile(1 - alpha / 2, df);
      return { ...base, p_value: p, confidence_interval: [theta - q * sd, theta + q * sd], significant: p < alpha };
    });
  return { baseline: { ...baseline, validation_failures: baselineFailures }, variant_results: results };
}

// ---- sample ratio mismatch ----
/** PostHog's SRM: a chi-square goodness-of-fit test once the variants have 100 exposures in all. */
export const SRM_MIN_EXPOSURES = 100;
/** Below this p-value PostHog warns that users are not split across variants as configured. */
export const SRM_P_VALUE_THRESHOLD = 0.001;

export interface SampleRatioMismatch {
  expected: Record<string, number>;
  observed: Record<string, number>;
  p_value: number;
  warning: boolean;
}

/** Upper regularized incomplete gamma Q(a, x) (series below a + 1, continued fraction above). */
function upperGamma(a: number, x: number): number {
  if (x <= 0) return 1;
  const logFront = -x + a * Math.log(x) - logGamma(a);
  if (x < a + 1) {
    let term = 1 / a;
    let sum = term;
    for (let n = 1; n < 1000; n++) {
      term *= x / (a + n);
      sum += term;
      if (Math.abs(term) < Math.abs(sum) * 1e-16) break;
    }
    return 1 - sum * Math.exp(logFront);
  }
  const tiny = 1e-300;
  let b = x + 1 - a;
  let c = 1 / tiny;
  let d = 1 / b;
  let h = d;
  for (let i = 1; i < 1000; i++) {
    const an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (Math.abs(d) < tiny) d = tiny;
    c = b + an / c;
    if (Math.abs(c) < tiny) c = tiny;
    d = 1 / d;
    const del = d * c;
    h *= del;
    if (Math.abs(del - 1) < 1e-16) break;
  }
  return Math.exp(logFront) * h;
}

/** P(X ≥ x) for X chi-square distributed with `df` degrees of freedom. */
export const chiSquareSurvival = (x: number, df: number) => upperGamma(df / 2, x / 2);

/**
 * Expected against observed exposures per variant, as PostHog checks them: the variants with a
 * rollout share above zero, expected counts in proportion to their shares (renormalised to the
 * variants counted, so a holdout or an excluded variant does not skew them), and the chi-square
 * p-value with k − 1 degrees of freedom. Null under 100 exposures in all, or with fewer than two variants.
 */
export function sampleRatioMismatch(
  exposures: Record<string, number>,
  rollout: Record<string, number>,
): SampleRatioMismatch | null {
  const keys = Object.keys(rollout).filter((k) => rollout[k] > 0);
  if (keys.length < 2) return null;
  const total = keys.reduce((s, k) => s + (exposures[k] ?? 0), 0);
  if (total < SRM_MIN_EXPOSURES) return null;
  const shares = keys.reduce((s, k) => s + rollout[k], 0);
  const expected: Record<string, number> = {};
  const observed: Record<string, number> = {};
  let chi2 = 0;
  for (const k of keys) {
    expected[k] = (rollout[k] / shares) * total;
    observed[k] = exposures[k] ?? 0;
    chi2 += (observed[k] - expected[k]) ** 2 / expected[k];
  }
  const p = chiSquareSurvival(chi2, keys.length - 1);
  return { expected, observed, p_value: p, warning: p < SRM_P_VALUE_THRESHOLD };
}

// ---- multiple-comparison correction (frequentist) ----
export const CORRECTION_METHODS = ['none', 'holm', 'benjamini_hochberg', 'preferential_bonferroni'] as const;
export type CorrectionMethod = (typeof CORRECTION_METHODS)[number];
export interface CorrectionConfig {
  method: CorrectionMethod;
  /** experiment: one family of every metric × variant comparison; metric: one family per metric. */
  scope: 'experiment' | 'metric';
  /** Preferential Bonferroni: the share of alpha spent on the primary metric (Eppo's γ). */
  primary_alpha_share: number;
}

/** Holm's step-down adjusted p-values (the order of `p` is kept). */
export function holmAdjust(p: number[]): number[] {
  const m = p.length;
  const order = p.map((_, i) => i).sort((a, b) => p[a] - p[b]);
  const out = new Array<number>(m);
  let running = 0;
  order.forEach((i, rank) => {
    running = Math.max(running, Math.min(1, (m - rank) * p[i]));
    out[i] = running;
  });
  return out;
}

/** Benjamini-Hochberg step-up adjusted p-values (q-values; the order of `p` is kept). */
export function benjaminiHochbergAdjust(p: number[]): number[] {
  const m = p.length;
  const order = p.map((_, i) => i).sort((a, b) => p[b] - p[a]);
  const out = new Array<number>(m);
  let running = 1;
  order.forEach((i, k) => {
    const rank = m - k;
    running = Math.min(running, (m / rank) * p[i]);
    out[i] = running;
  });
  return out;
}

export interface CorrectedTest {
  /** Adjusted p-value, to compare with the family's alpha. */
  p: number;
  /** The alpha this comparison is tested at: p < alpha_i exactly when the adjusted p < alpha. */
  alpha: number;
}

/**
 * Adjusted p-values and per-comparison alphas for one family. `shares` are the preferential
 * Bonferroni allocations (each comparison's part of alpha, summing to at most 1); for Holm and
 * Benjamini-Hochberg the per-comparison alpha is alpha · p / p_adjusted, the level whose interval
 * excludes zero exactly when the adjusted p-value is below alpha.
 */
export function correctFamily(
  p: number[],
  method: Exclude<CorrectionMethod, 'none'>,
  alpha: number,
  shares?: number[],
): CorrectedTest[] {
  if (method === 'preferential_bonferroni') {
    return p.map((pi, i) => {
      const share = shares?.[i] ?? 1 / p.length;
      return { p: Math.min(1, pi / share), alpha: alpha * share };
    });
  }
  const adjusted = method === 'holm' ? holmAdjust(p) : benjaminiHochbergAdjust(p);
  return adjusted.map((pa, i) => ({ p: pa, alpha: pa > 0 ? (alpha * p[i]) / pa : alpha / p.length }));
}

export interface MetricStats {
  kind: MetricKind;
  variants: VariantStats[];
}

export type MetricAnalysis = ExperimentResult & {
  kind: MetricKind;
  sample_ratio_mismatch: SampleRatioMismatch | null;
  multiple_comparison_correction: {
    method: CorrectionMethod;
    scope: 'experiment' | 'metric';
    alpha: number;
    family_size: number;
  } | null;
  /** Sequential testing in force (frequentist), or null: p-values always valid, intervals confidence sequences. */
  sequential_testing: { method: typeof SEQUENTIAL_METHOD; tuning_parameter: number; alpha: number } | null;
};

export interface AnalysisSettings {
  method: 'bayesian' | 'frequentist';
  baselineKey: string;
  alpha?: number;
  correction?: CorrectionConfig | null;
  /** Index of the primary metric among the metrics analysed (preferential Bonferroni). */
  primaryMetric?: number;
  /** Rollout percentage per variant (the flag's), for the sample ratio mismatch check. */
  rollout?: Record<string, number>;
  /** Sequential testing (frequentist only; ignored for the Bayesian method). */
  sequential?: SequentialConfig | null;
}

/**
 * One day's results of an experiment's metrics: each metric's comparisons, the sample ratio
 * mismatch of its exposures, and, for the frequentist method with a correction chosen, p-values
 * adjusted over the family (the experiment's comparisons or the metric's) and intervals at each
 * comparison's adjusted alpha, so that `significant`, the adjusted p-value and the interval agree.
 */
export function analyseMetrics(metrics: (MetricStats | null)[], settings: AnalysisSettings): (MetricAnalysis | null)[] {
  const alpha = settings.alpha ?? 0.05;
  const sequential = settings.method === 'frequentist' ? (settings.sequential ?? null) : null;
  const sequentialTesting = sequential
    ? { method: SEQUENTIAL_METHOD, tuning_parameter: sequential.tuning_parameter, alpha }
    : null;
  const raw = metrics.map((m) =>
    m ? compareVariants(m.variants, settings.baselineKey, m.kind, settings.method, { alpha, sequential }) : null,
  );
  const srm = (m: MetricStats) =>
    settings.rollout
      ? sampleRatioMismatch(Object.fromEntries(m.variants.map((v) => [v.key, v.number_of_samples])), settings.rollout)
      : null;
  const correction = settings.correction;
  if (settings.method !== 'frequentist' || !correction || correction.method === 'none') {
    return metrics.map((m, i) =>
      m
        ? {
            kind: m.kind,
            ...raw[i]!,
            sample_ratio_mismatch: srm(m),
            multiple_comparison_correction: null,
            sequential_testing: sequentialTesting,
          }
        : null,
    );
  }
  const method = correction.method;
  // Every comparison with a p-value, by family.
  const tests = raw.flatMap((r, metric) =>
    (r?.variant_results ?? [])
      .filter((v) => typeof v.p_value === 'number')
      .map((v) => ({ metric, key: v.key as string, p: v.p_value as number, treatments: r!.variant_results.length })),
  );
  const familyOf = (t: { metric: number }) => (correction.scope === 'experiment' ? 0 : t.metric);
  const corrected = new Map<string, CorrectedTest>();
  const familySize = new Map<number, number>();
  for (const family of new Set(tests.map(familyOf))) {
    const members = tests.filter((t) => familyOf(t) === family);
    familySize.set(family, members.length);
    // Preferential Bonferroni (Eppo): γ·α/k for the primary metric, (1 − γ)·α/(k·(m − 1)) for the
    // other m − 1 metrics, k being the treatment variants; α/k each within one metric.
    const m = correction.scope === 'experiment' ? metrics.length : 1;
    const gamma = correction.primary_alpha_share;
    const shares = members.map((t) => {
      if (m === 1) return 1 / t.treatments;
      return t.metric === (settings.primaryMetric ?? 0) ? gamma / t.treatments : (1 - gamma) / (t.treatments * (m - 1));
    });
    const out = correctFamily(
      members.map((t) => t.p),
      method,
      alpha,
      shares,
    );
    for (const [i, t] of members.entries()) corrected.set(`${t.metric}\u0000${t.key}`, out[i]);
  }
  return metrics.map((m, metric) => {
    if (!m) return null;
    const variantAlphas: Record<string, number> = {};
    for (const v of raw[metric]!.variant_results) {
      const c = corrected.get(`${metric}\u0000${v.key as string}`);
      if (c) variantAlphas[v.key as string] = c.alpha;
    }
    const result = compareVariants(m.variants, settings.baselineKey, m.kind, 'frequentist', {
      alpha,
      variantAlphas,
      sequential,
    });
    result.variant_results = result.variant_results.map((v) => {
      const c = corrected.get(`${metric}\u0000${v.key as string}`);
      if (!c) return v;
      const [lo, hi] = v.confidence_interval as [number, number];
      return {
        ...v,
        p_value: c.p,
        unadjusted_p_value: v.p_value,
        adjusted_alpha: c.alpha,
        // From the interval shown, so the label never disagrees with it.
        significant: lo > 0 || hi < 0,
      };
    });
    return {
      kind: m.kind,
      ...result,
      sample_ratio_mismatch: srm(m),
      multiple_comparison_correction: {
        method,
        scope: correction.scope,
        alpha,
        family_size: familySize.get(correction.scope === 'experiment' ? 0 : metric) ?? 0,
      },
      sequential_testing: sequentialTesting,
    };
  });
}

/** The correction chosen in an experiment's stats_config (validated by the API), or null for none. */
export function correctionConfig(statsConfig: unknown): CorrectionConfig | null {
  const c = (statsConfig as { multiple_comparison_correction?: Partial<CorrectionConfig> } | null)
    ?.multiple_comparison_correction;
  if (!c || typeof c !== 'object' || !c.method || !CORRECTION_METHODS.includes(c.method) || c.method === 'none')
    return null;
  return {
    method: c.method,
    scope: c.scope === 'metric' ? 'metric' : 'experiment',
    primary_alpha_share: typeof c.primary_alpha_share === 'number' ? c.primary_alpha_share : 0.5,
  };
}

/** PostHog's CUPED lookback: 14 days unless set, 1 to 30. */
export const CUPED_DEFAULT_LOOKBACK_DAYS = 14;

/** The CUPED lookback in days chosen in an experiment's stats_config, or 0 when CUPED is off. */
export function cupedLookbackDays(statsConfig: unknown): number {
  const c = (statsConfig as { cuped?: { enabled?: unknown; lookback_days?: unknown } } | null)?.cuped;
  if (!c || typeof c !== 'object' || c.enabled !== true) return 0;
  // The API refuses other values; a stored one outside 1–30 is clamped, as PostHog does.
  const days = typeof c.lookback_days === 'number' ? Math.trunc(c.lookback_days) : CUPED_DEFAULT_LOOKBACK_DAYS;
  return Math.min(30, Math.max(1, Number.isFinite(days) ? days : CUPED_DEFAULT_LOOKBACK_DAYS));
}
