// Multi-armed bandit allocation (Thompson sampling) and the estimate that corrects for it. Pure
// functions: the worker's job (bandit-job.ts) feeds them the experiment's counts; the simulation
// (bandit-simulation.ts) feeds them simulated ones.
//
// An experiment asks for it in parameters.allocation:
//   {"type": "thompson_sampling", "interval_hours": 24, "floor": 0.05, "min_exposures": 100}
// (only `type` is required). Every `interval_hours` the worker computes, on the primary metric, each
// variant's probability of being the best under its posterior (Beta(1 + conversions, 1 + failures)
// for a funnel; Normal(mean, s²/n) for a mean or a ratio), gives each variant at least `floor` and
// the rest in proportion to those probabilities, and sets the flag's variant rollout percentages to
// that (whole percentages). Persons keep the variant they were first served (the flag's sticky
// assignments, shared/flags/).
//
// The estimate: per period between reallocations (persons by the period of their first exposure) the
// difference of means between a variant and control is unbiased (its allocation was fixed, chosen
// from earlier data only); the periods are combined as Zhang, Janson & Murphy's batched OLS ("Inference
// for Batched Bandits", NeurIPS 2020): each period's difference standardised by its own standard error
// is N(0, 1) around the true effect given the past, whatever the allocation, so
// Σ_p (d_p − θ)/s_p ~ N(0, P) and θ̂ = Σ d_p/s_p ÷ Σ 1/s_p with the interval θ̂ ± z·√P ÷ Σ 1/s_p.
// The pooled difference (all persons together) leans toward the arm the bandit favoured when the
// rates drift over time, and its usual interval is not valid under adaptive allocation.
import { type MetricKind, moments, type VariantStats } from './moments.ts';
import { gamma, normal, type Rng } from './simulation.ts';
import { normalQuantile } from './stats.ts';

export const ALLOCATION_TYPES = ['thompson_sampling'] as const;
export const DEFAULT_INTERVAL_HOURS = 24;
export const DEFAULT_FLOOR = 0.05;
export const DEFAULT_MIN_EXPOSURES = 100;
/** Posterior draws per reallocation. */
export const THOMPSON_DRAWS = 10_000;
/** A period with fewer persons than this in an arm is merged into the next one (normal approximation). */
export const MIN_PERIOD_SAMPLES = 30;

export interface AllocationConfig {
  type: (typeof ALLOCATION_TYPES)[number];
  /** Hours between reallocations (1–720). */
  interval_hours: number;
  /** The least share each variant keeps, in [0, 1/variants]. */
  floor: number;
  /** Exposures every variant needs before the first reallocation. */
  min_exposures: number;
}

const record = (x: unknown): Record<string, unknown> =>
  x && typeof x === 'object' && !Array.isArray(x) ? (x as Record<string, unknown>) : {};

/** What is wrong with parameters.allocation (null when it is absent or right). */
export function allocationProblem(parameters: unknown, variants: number): string | null {
  const raw = record(parameters).allocation;
  if (raw === undefined || raw === null) return null;
  if (typeof raw !== 'object' || Array.isArray(raw))
    return 'parameters.allocation must be an object: {"type": "thompson_sampling", "interval_hours": 24}.';
  const a = raw as Record<string, unknown>;
  if (!ALLOCATION_TYPES.includes(a.type as 'thompson_sampling'))
    return `parameters.allocation.type must be one of ${ALLOCATION_TYPES.join(', ')}.`;
  const known = new Set(['type', 'interval_hours', 'floor', 'min_exposures']);
  const unknown = Object.keys(a).filter((k) => !known.has(k));
  if (unknown.length) return `parameters.allocation does not take ${unknown.join(', ')}.`;
  const h = a.interval_hours;
  if (h !== undefined && !(typeof h === 'number' && Number.isFinite(h) && h >= 1 && h <= 720))
    return 'parameters.allocation.interval_hours must be a number of hours from 1 to 720.';
  const f = a.floor;
  const k = Math.max(variants, 2);
  if (f !== undefined && !(typeof f === 'number' && f >= 0 && Math.ceil(f * 100 - 1e-9) * k <= 100))
    return `parameters.allocation.floor must be a share from 0 to ${(Math.floor(100 / k) / 100).toFixed(2)} (each of ${k} variants keeps it).`;
  const m = a.min_exposures;
  if (m !== undefined && !(Number.isInteger(m) && (m as number) >= 1))
    return 'parameters.allocation.min_exposures must be a whole number ≥ 1.';
  return null;
}

/** The experiment's adaptive allocation with its defaults, or null when it has none (the default). */
export function allocationOf(parameters: unknown): AllocationConfig | null {
  const a = record(record(parameters).allocation);
  if (!ALLOCATION_TYPES.includes(a.type as 'thompson_sampling')) return null;
  const num = (v: unknown, d: number) => (typeof v === 'number' && Number.isFinite(v) ? v : d);
  return {
    type: 'thompson_sampling',
    interval_hours: num(a.interval_hours, DEFAULT_INTERVAL_HOURS),
    floor: num(a.floor, DEFAULT_FLOOR),
    min_exposures: num(a.min_exposures, DEFAULT_MIN_EXPOSURES),
  };
}

/** A Beta(a, b) draw. */
const beta = (rng: Rng, a: number, b: number) => {
  const x = gamma(rng, a);
  return x / (x + gamma(rng, b));
};

/**
 * Each variant's posterior probability of being the best (Monte Carlo, `draws` draws): Beta(1 + s,
 * 1 + n − s) for a funnel's conversion, Normal(mean, variance/n) for a mean or a ratio. Null when a
 * variant has no exposure (or a mean fewer than 2).
 */
export function thompsonProbabilities(
  kind: MetricKind,
  variants: readonly VariantStats[],
  rng: Rng,
  options: { draws?: number; lowerIsBetter?: boolean } = {},
): number[] | null {
  const draws = options.draws ?? THOMPSON_DRAWS;
  const sign = options.lowerIsBetter ? -1 : 1;
  const samplers = variants.map((v): (() => number) | null => {
    const n = v.number_of_samples;
    if (kind === 'funnel') {
      if (!(n > 0)) return null;
      const s = Math.min(Math.max(v.sum, 0), n);
      return () => beta(rng, 1 + s, 1 + n - s);
    }
    if (!(n > 1)) return null;
    const m = moments(v, kind);
    const se = Math.sqrt(m.variance / n);
    if (!Number.isFinite(m.mean) || !Number.isFinite(se)) return null;
    return () => m.mean + se * normal(rng);
  });
  if (samplers.some((s) => s === null)) return null;
  const wins = new Array<number>(variants.length).fill(0);
  for (let d = 0; d < draws; d++) {
    let best = 0;
    let bestValue = -Infinity;
    for (let k = 0; k < samplers.length; k++) {
      const value = sign * samplers[k]!();
      if (value > bestValue) {
        bestValue = value;
        best = k;
      }
    }
    wins[best]++;
  }
  return wins.map((w) => w / draws);
}

/**
 * Rollout percentages (whole numbers summing to 100) from the probabilities of being best: each
 * variant keeps ⌈floor·100⌉ and the rest is shared in proportion to the probabilities (largest
 * remainders get the leftover points, earlier variants first on ties).
 */
export function allocationPercentages(probabilities: readonly number[], floor: number): number[] {
  const k = probabilities.length;
  const floorPct = Math.min(Math.ceil(floor * 100 - 1e-9), Math.floor(100 / k));
  const rest = 100 - k * floorPct;
  const total = probabilities.reduce((a, b) => a + b, 0);
  const shares = probabilities.map((p) => (total > 0 ? (p / total) * rest : rest / k));
  const out = shares.map((s) => floorPct + Math.floor(s + 1e-9));
  let left = 100 - out.reduce((a, b) => a + b, 0);
  const order = shares.map((s, i) => ({ i, r: s - Math.floor(s + 1e-9) })).sort((a, b) => b.r - a.r || a.i - b.i);
  for (let j = 0; left > 0; j = (j + 1) % k, left--) out[order[j].i]++;
  return out;
}

/** n, Σv, Σv² (and a ratio's denominator sums, a funnel's steps) of `a` and `b` together. */
function added(a: VariantStats, b: VariantStats): VariantStats {
  const out: VariantStats = {
    key: a.key,
    number_of_samples: a.number_of_samples + b.number_of_samples,
    sum: a.sum + b.sum,
    sum_squares: a.sum_squares + b.sum_squares,
  };
  if (a.denominator_sum !== undefined || b.denominator_sum !== undefined) {
    out.denominator_sum = (a.denominator_sum ?? 0) + (b.denominator_sum ?? 0);
    out.denominator_sum_squares = (a.denominator_sum_squares ?? 0) + (b.denominator_sum_squares ?? 0);
    out.numerator_denominator_sum_product =
      (a.numerator_denominator_sum_product ?? 0) + (b.numerator_denominator_sum_product ?? 0);
  }
  return out;
}

/** Per variant (in `keys` order), the counts of all periods together. */
export function pooledCounts(periods: readonly VariantStats[][], keys: readonly string[]): VariantStats[] {
  return keys.map((key) =>
    periods
      .map((p) => p.find((v) => v.key === key))
      .reduce<VariantStats>((acc, v) => (v ? added(acc, v) : acc), {
        key,
        number_of_samples: 0,
        sum: 0,
        sum_squares: 0,
      }),
  );
}

export interface BanditEstimate {
  variant: string;
  /** Period-weighted difference of means, variant − control (absolute). */
  estimate: number | null;
  /** Its interval at the level asked (95% by default). */
  interval: [number, number] | null;
  /** The pooled difference (all persons together), biased under adaptive allocation: for comparison. */
  unweighted_estimate: number | null;
  /** Periods (after merging small ones) that entered the estimate. */
  periods: number;
}

/**
 * The difference of each variant from `baselineKey`, periods combined as the batched OLS estimator
 * does (see the top of this file). `periods[p]` holds the counts of the persons first exposed in
 * period p; a period with fewer than `minSamples` persons in either arm is merged into the next (the
 * last into the one before).
 */
export function weightedEstimates(
  kind: MetricKind,
  periods: readonly VariantStats[][],
  keys: readonly string[],
  baselineKey: string,
  options: { alpha?: number; minSamples?: number } = {},
): BanditEstimate[] {
  const alpha = options.alpha ?? 0.05;
  const minSamples = options.minSamples ?? MIN_PERIOD_SAMPLES;
  const z = normalQuantile(1 - alpha / 2);
  const pooled = pooledCounts(periods, keys);
  const baseline = pooled.find((v) => v.key === baselineKey);
  // A period's difference of means, and its variance from each arm's per-person variance over all
  // periods: a period's own variance estimate moves with its own difference (a funnel's p(1 − p)),
  // and weighting by it would bias the combination.
  const variance = new Map(pooled.map((v) => [v.key, v.number_of_samples > 1 ? moments(v, kind).variance : 0]));
  const difference = (t: VariantStats, c: VariantStats) => ({
    d: moments(t, kind).mean - moments(c, kind).mean,
    v: variance.get(t.key)! / t.number_of_samples + variance.get(c.key)! / c.number_of_samples,
  });
  return keys
    .filter((k) => k !== baselineKey)
    .map((key) => {
      const treatment = pooled.find((v) => v.key === key)!;
      const unweighted =
        baseline && baseline.number_of_samples > 0 && treatment.number_of_samples > 0
          ? difference(treatment, baseline).d
          : null;
      // The periods of this comparison, small ones merged forward.
      const pairs: [VariantStats, VariantStats][] = [];
      let pending: [VariantStats, VariantStats] | null = null;
      for (const period of periods) {
        const t = period.find((v) => v.key === key) ?? { key, number_of_samples: 0, sum: 0, sum_squares: 0 };
        const c = period.find((v) => v.key === baselineKey) ?? {
          key: baselineKey,
          number_of_samples: 0,
          sum: 0,
          sum_squares: 0,
        };
        const pair: [VariantStats, VariantStats] = pending ? [added(pending[0], t), added(pending[1], c)] : [t, c];
        if (Math.min(pair[0].number_of_samples, pair[1].number_of_samples) >= minSamples) {
          pairs.push(pair);
          pending = null;
        } else pending = pair;
      }
      if (pending && pairs.length) {
        const last = pairs.pop()!;
        pairs.push([added(last[0], pending[0]), added(last[1], pending[1])]);
      }
      let sumZ = 0;
      let sumW = 0;
      let used = 0;
      for (const [t, c] of pairs) {
        const { d, v } = difference(t, c);
        if (!(v > 0) || !Number.isFinite(d)) continue;
        const s = Math.sqrt(v);
        sumZ += d / s;
        sumW += 1 / s;
        used++;
      }
      if (!used) return { variant: key, estimate: null, interval: null, unweighted_estimate: unweighted, periods: 0 };
      const estimate = sumZ / sumW;
      const half = (z * Math.sqrt(used)) / sumW;
      return {
        variant: key,
        estimate,
        interval: [estimate - half, estimate + half],
        unweighted_estimate: unweighted,
        periods: used,
      };
    });
}
