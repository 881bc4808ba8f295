// Percentile metrics (issue #46, item 2): P50–P99 of a numeric event property, compared between each
// test variant and control, absolute and relative, with a confidence interval.
//
// The metric (in experiment.metrics / metrics_secondary, as PostHog's ExperimentMetric):
//   {"kind":"ExperimentMetric","metric_type":"percentile","percentile":0.9,"percentile_unit":"per_event",
//    "source":{"kind":"EventsNode","event":"api_call","math":"sum","math_property":"$latency"}}
// - percentile_unit "per_person" (default): each exposed person's value is the one a mean metric with
//   the same source gives them (the sum of math_property over their events after their first exposure,
//   or, with math "total", the count of those events; 0 when they have none), and the percentile is
//   over persons. For "order value per buyer", "errors per user".
// - percentile_unit "per_event": every such event with a numeric math_property (events without one are
//   left out) of an exposed person after their first exposure, and the percentile is over events; a
//   person contributes several, so the interval is corrected for that clustering (below). For latency.
// The exposure rules are the mean metric's (results.ts): a person counts from their first exposure and
// not at all from the day they are exposed to a second variant.
//
// The method: Deng, Knoblich and Lu (2018), "Applying the Delta Method in Metric Analytics: A Practical
// Guide with Novel Ideas" (KDD 2018), section on percentile metrics. The sample p-quantile is the order
// statistic Q̂ = X₍⌈np⌉₎ of the n values. Its confidence interval is the "outer" interval: the order
// statistics at ranks n·(p ∓ z·σ_p), where σ_p² is the variance of the fraction of values ≤ Q̂:
//   - independent values (per person): σ_p² = p(1 − p)/n (the binomial's);
//   - values clustered in persons (per event): the fraction is a ratio Σᵢ Sᵢ / Σᵢ Nᵢ over the K persons
//     (Sᵢ of person i's Nᵢ values ≤ Q̂), whose delta-method variance is
//     σ_p² = (s²_S − 2r·s_SN + r²·s²_N) / (K·N̄²), r = S̄/N̄ (s² the persons' sample (co)variances).
// The interval's half-width gives the quantile's standard error, σ_Q = (X₍U₎ − X₍L₎)/(2z) (the paper's
// way to a variance without estimating the density at Q̂). The variants are independent, so the
// difference Δ = Q̂_T − Q̂_C has variance σ²_T + σ²_C: Δ ± z·sqrt(σ²_T + σ²_C), two-sided p-value
// 2(1 − Φ(|Δ|/σ_Δ)); the relative difference Δ/Q̂_C by the delta method, variance
// σ²_T/Q̂²_C + Q̂²_T·σ²_C/Q̂⁴_C (as the mean metrics' relative effect). The frequentist result reports
// the relative interval in `confidence_interval` (as the other metrics) and both in `difference`.
// Bayesian: the same normal approximation read as the posterior of Δ under a flat prior: the credible
// interval equals the confidence interval and chance_to_win = Φ(Δ/σ_Δ) (the chance the treatment's
// percentile is higher). That is an approximation, and the result says so (`approximation`).
// Not applied to percentile metrics: CUPED, sequential testing, multiple-comparison corrections.
import { MIN_EXPOSURES, normalCdf, normalQuantile } from './stats.ts';

export const PERCENTILE_MIN = 0.5;
export const PERCENTILE_MAX = 0.99;
export const PERCENTILE_UNITS = ['per_person', 'per_event'] as const;
export type PercentileUnit = (typeof PERCENTILE_UNITS)[number];
export const PERCENTILE_METHOD = 'outer_interval_delta_method' as const;

/** A percentile metric as stored (the fields the engine reads). */
export interface PercentileMetricShape {
  event: string;
  /** The property summed (per person) or taken (per event); null: per person, the count of events. */
  property: string | null;
  percentile: number;
  unit: PercentileUnit;
}

const isRecord = (x: unknown): x is Record<string, unknown> => !!x && typeof x === 'object' && !Array.isArray(x);

/** Why a percentile metric is invalid (a sentence for the 400), or null when it is valid (or not a percentile metric). */
export function percentileMetricProblem(metric: unknown): string | null {
  if (!isRecord(metric) || metric.metric_type !== 'percentile') return null;
  const p = metric.percentile;
  if (typeof p !== 'number' || !Number.isFinite(p) || p < PERCENTILE_MIN || p > PERCENTILE_MAX)
    return `A percentile metric needs percentile, a number from ${PERCENTILE_MIN} to ${PERCENTILE_MAX} (0.9 for P90).`;
  const unit = metric.percentile_unit ?? 'per_person';
  if (typeof unit !== 'string' || !(PERCENTILE_UNITS as readonly string[]).includes(unit))
    return `The percentile metric's percentile_unit must be one of ${PERCENTILE_UNITS.join(', ')}.`;
  const source = metric.source;
  if (!isRecord(source))
    return 'A percentile metric needs a source: an EventsNode with an event and its math_property.';
  if (source.kind !== undefined && source.kind !== 'EventsNode')
    return "The percentile metric's source must be an EventsNode.";
  if (typeof source.event !== 'string' || !source.event) return "The percentile metric's source needs an event.";
  const math = source.math ?? 'sum';
  if (math !== 'sum' && math !== 'total') return "The percentile metric's source math must be sum or total.";
  const property = source.math_property;
  if ((math === 'sum' || unit === 'per_event') && (typeof property !== 'string' || !property))
    return "The percentile metric's source needs math_property: the numeric property whose percentile is taken.";
  if (unit === 'per_event' && math !== 'sum')
    return "A per_event percentile metric takes each event's math_property: its source math must be sum.";
  return null;
}

/** A valid percentile metric's shape, or null. */
export function percentileShape(metric: unknown): PercentileMetricShape | null {
  if (!isRecord(metric) || metric.metric_type !== 'percentile' || percentileMetricProblem(metric)) return null;
  const source = metric.source as Record<string, unknown>;
  const math = source.math ?? 'sum';
  return {
    event: source.event as string,
    property: math === 'sum' ? (source.math_property as string) : null,
    percentile: metric.percentile as number,
    unit: (metric.percentile_unit ?? 'per_person') as PercentileUnit,
  };
}

/** One arm's sample: its values and, for clustered values, each value's cluster (person) number. */
export interface PercentileArm {
  key: string;
  values: ArrayLike<number>;
  /** Each value's cluster (any integer id per person); omitted: every value its own unit (independent). */
  clusters?: ArrayLike<number>;
  /** Persons exposed (reported as number_of_samples); default: clusters, or values. */
  exposures?: number;
}

export interface QuantileEstimate {
  quantile: number;
  /** The outer confidence interval of the quantile itself. */
  interval: [number, number];
  /** Its standard error, (upper − lower)/(2z). */
  standard_error: number;
  values: number;
  clusters: number;
}

/** X₍k₎ of sorted values, k from 1 (clamped to [1, n]). */
const rank = (sorted: Float64Array, k: number) => sorted[Math.min(sorted.length, Math.max(1, Math.ceil(k - 1e-9))) - 1];

/** The order statistic at a real rank r (from 1), linear between X₍⌊r⌋₎ and X₍⌊r⌋+1₎, clamped to [X₍₁₎, X₍ₙ₎]. */
function atRank(sorted: Float64Array, r: number): number {
  const n = sorted.length;
  if (r <= 1) return sorted[0];
  if (r >= n) return sorted[n - 1];
  const k = Math.floor(r);
  return sorted[k - 1] + (r - k) * (sorted[k] - sorted[k - 1]);
}

/**
 * The p-quantile of `values` (X₍⌈np⌉₎) with its outer interval at level 1 − alpha (Deng et al. 2018;
 * see the file's head), clustered when `clusters` is given. Null when there are no values.
 */
export function quantileEstimate(
  values: ArrayLike<number>,
  p: number,
  alpha = 0.05,
  clusters?: ArrayLike<number>,
): QuantileEstimate | null {
  const n = values.length;
  if (n === 0) return null;
  const sorted = Float64Array.from(values).sort();
  const q = rank(sorted, n * p);
  const z = normalQuantile(1 - alpha / 2);
  let variance = (p * (1 - p)) / n;
  let k = n;
  if (clusters) {
    // Per cluster: Nᵢ values, Sᵢ of them ≤ Q̂.
    const index = new Map<number, number>();
    const size: number[] = [];
    const below: number[] = [];
    for (let i = 0; i < n; i++) {
      let c = index.get(clusters[i]);
      if (c === undefined) {
        c = size.length;
        index.set(clusters[i], c);
        size.push(0);
        below.push(0);
      }
      size[c]++;
      if (values[i] <= q) below[c]++;
    }
    k = size.length;
    if (k > 1) {
      const meanN = n / k;
      let sumS = 0;
      for (const s of below) sumS += s;
      const meanS = sumS / k;
      let ss = 0;
      let sn = 0;
      let nn = 0;
      for (let c = 0; c < k; c++) {
        const ds = below[c] - meanS;
        const dn = size[c] - meanN;
        ss += ds * ds;
        sn += ds * dn;
        nn += dn * dn;
      }
      const r = meanS / meanN;
      variance = Math.max((ss - 2 * r * sn + r * r * nn) / (k - 1) / (k * meanN * meanN), 0);
    }
  }
  // The outer interval: the order statistics at ranks n(p ∓ zσ_p), interpolated between neighbours.
  const half = z * Math.sqrt(variance);
  const lower = atRank(sorted, n * (p - half));
  const upper = atRank(sorted, n * (p + half));
  return { quantile: q, interval: [lower, upper], standard_error: (upper - lower) / (2 * z), values: n, clusters: k };
}

export interface PercentileComparisonOptions {
  percentile: number;
  baselineKey: string;
  method?: 'bayesian' | 'frequentist';
  /** Two-sided level: intervals at 1 − alpha (default 0.05). */
  alpha?: number;
  unit?: PercentileUnit;
}

/** A percentile metric's result: the shape of the other metrics' (stats.ts, MetricAnalysis) plus the quantiles. */
export interface PercentileResult {
  kind: 'percentile';
  percentile: number;
  unit: PercentileUnit;
  approximation: string;
  baseline: Record<string, unknown> & { key: string; validation_failures: string[] };
  variant_results: (Record<string, unknown> & { key: string })[];
  sample_ratio_mismatch: null;
  multiple_comparison_correction: null;
  sequential_testing: null;
}

function armSummary(arm: PercentileArm, p: number, alpha: number) {
  const estimate = quantileEstimate(arm.values, p, alpha, arm.clusters);
  const exposures = arm.exposures ?? estimate?.clusters ?? 0;
  const failures: string[] = [];
  if (exposures < MIN_EXPOSURES) failures.push('NOT_ENOUGH_EXPOSURES');
  if (!estimate) failures.push('NO_VALUES');
  return {
    estimate,
    summary: {
      key: arm.key,
      number_of_samples: exposures,
      number_of_values: arm.values.length,
      quantile: estimate?.quantile ?? null,
      quantile_interval: estimate?.interval ?? null,
      quantile_standard_error: estimate?.standard_error ?? null,
      validation_failures: failures,
    },
  };
}

/**
 * The simulation hook (and the engine's comparison): each arm's p-quantile and, for each arm other than
 * `baselineKey`, its difference from the baseline's, absolute and relative, with the interval and the
 * p-value (frequentist) or the chance to win (Bayesian, same normal approximation). Pure: no I/O, no
 * randomness. See the file's head for the method.
 */
export function percentileComparison(arms: PercentileArm[], options: PercentileComparisonOptions): PercentileResult {
  const { percentile: p, baselineKey } = options;
  if (!(p >= PERCENTILE_MIN && p <= PERCENTILE_MAX))
    throw new RangeError(`percentile must lie in [${PERCENTILE_MIN}, ${PERCENTILE_MAX}]`);
  const method = options.method ?? 'frequentist';
  const alpha = options.alpha ?? 0.05;
  const z = normalQuantile(1 - alpha / 2);
  const unit = options.unit ?? (arms.some((a) => a.clusters) ? 'per_event' : 'per_person');
  const baselineArm = arms.find((a) => a.key === baselineKey) ?? arms[0] ?? { key: baselineKey, values: [] };
  const base = armSummary(baselineArm, p, alpha);
  const variantResults = arms
    .filter((a) => a !== baselineArm)
    .map((arm) => {
      const { estimate: t, summary } = armSummary(arm, p, alpha);
      const c = base.estimate;
      const failures = summary.validation_failures;
      const empty =
        method === 'bayesian'
          ? { chance_to_win: null, credible_interval: null, significant: null, difference: null }
          : { p_value: null, confidence_interval: null, significant: null, difference: null };
      const out = { ...summary, method };
      if (failures.length || base.summary.validation_failures.length || !t || !c) return { ...out, ...empty };
      const absolute = t.quantile - c.quantile;
      const varAbs = t.standard_error ** 2 + c.standard_error ** 2;
      if (!(varAbs > 0)) return { ...out, ...empty, validation_failures: [...failures, 'ZERO_VARIANCE'] };
      const seAbs = Math.sqrt(varAbs);
      const absoluteInterval: [number, number] = [absolute - z * seAbs, absolute + z * seAbs];
      const relative = c.quantile !== 0 ? absolute / c.quantile : null;
      const seRel =
        c.quantile !== 0
          ? Math.sqrt(
              t.standard_error ** 2 / c.quantile ** 2 + (t.quantile ** 2 * c.standard_error ** 2) / c.quantile ** 4,
            )
          : null;
      const relativeInterval: [number, number] | null =
        relative !== null && seRel !== null ? [relative - z * seRel, relative + z * seRel] : null;
      const difference = {
        absolute,
        absolute_interval: absoluteInterval,
        absolute_standard_error: seAbs,
        relative,
        relative_interval: relativeInterval,
      };
      const significant = absoluteInterval[0] > 0 || absoluteInterval[1] < 0;
      if (method === 'bayesian') {
        return {
          ...out,
          chance_to_win: normalCdf(absolute / seAbs),
          credible_interval: relativeInterval,
          significant,
          difference,
        };
      }
      return {
        ...out,
        p_value: 2 * (1 - normalCdf(Math.abs(absolute) / seAbs)),
        confidence_interval: relativeInterval,
        significant,
        difference,
      };
    });
  return {
    kind: 'percentile',
    percentile: p,
    unit,
    approximation:
      method === 'bayesian'
        ? `${PERCENTILE_METHOD}: Deng, Knoblich & Lu (2018) outer interval, read as a normal posterior under a flat prior`
        : `${PERCENTILE_METHOD}: Deng, Knoblich & Lu (2018) outer interval and delta method`,
    baseline: base.summary,
    variant_results: variantResults,
    sample_ratio_mismatch: null,
    multiple_comparison_correction: null,
    sequential_testing: null,
  };
}
