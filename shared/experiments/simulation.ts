// A seeded simulation harness for the experiment statistics: a small PRNG, exact normal, gamma and
// binomial sampling, and simulated experiments as the per-day cumulative sufficient statistics the
// real engine analyses (VariantStats per variant and metric). Pure functions: the suites in
// test/shared/experiments/experiments-simulation.test.ts and bench/experiments-simulation.ts feed them to the
// real analyseMetrics/compareVariants of ./stats.ts, so the error rates they measure are the
// engine's. The guardrail suite (./guardrail-simulation.ts) reads them every few minutes (simulateLooks).
import { type AnalysisSettings, analyseMetrics, type CorrectionMethod, type MetricStats } from './stats.ts';
import type { MetricKind, VariantStats } from './moments.ts';

export type Rng = () => number;

/**
 * sfc32 seeded through splitmix32: uniform numbers in (0, 1), the same sequence for the same seed.
 * The state is kept as int32 (`| 0`): the same bits as uint32 arithmetic, but V8 keeps small integers
 * unboxed, three times as fast as `>>> 0` (whose values above 2³¹ become heap numbers).
 */
export function seededRng(seed: number): Rng {
  let s = seed >>> 0;
  const split = () => {
    s = (s + 0x9e3779b9) >>> 0;
    let z = s;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
    return (z ^ (z >>> 16)) | 0;
  };
  let a = split();
  let b = split();
  let c = split();
  let d = split();
  return () => {
    const t = (((a + b) | 0) + d) | 0;
    d = (d + 1) | 0;
    a = b ^ (b >>> 9);
    b = (c + (c << 3)) | 0;
    c = (c << 21) | (c >>> 11);
    c = (c + t) | 0;
    return ((t >>> 0) + 0.5) / 4294967296;
  };
}

/** A standard normal draw (Box-Muller). */
export function normal(rng: Rng): number {
  return Math.sqrt(-2 * Math.log(rng())) * Math.cos(2 * Math.PI * rng());
}

/** A Gamma(shape, 1) draw (Marsaglia & Tsang; shape < 1 by the boost U^(1/shape)). */
export function gamma(rng: Rng, shape: number): number {
  if (shape < 1) return gamma(rng, shape + 1) * rng() ** (1 / shape);
  const d = shape - 1 / 3;
  const c = 1 / Math.sqrt(9 * d);
  for (;;) {
    let x: number;
    let v: number;
    do {
      x = normal(rng);
      v = 1 + c * x;
    } while (v <= 0);
    v = v * v * v;
    const u = rng();
    if (u < 1 - 0.0331 * x ** 4 || Math.log(u) < 0.5 * x * x + d * (1 - v + Math.log(v))) return d * v;
  }
}

/** Two independent standard normal draws (both halves of one Box-Muller transform). */
export function normalPair(rng: Rng): [number, number] {
  const r = Math.sqrt(-2 * Math.log(rng()));
  const a = 2 * Math.PI * rng();
  return [r * Math.cos(a), r * Math.sin(a)];
}

/** A chi-square draw with k degrees of freedom. */
export const chiSquare = (rng: Rng, k: number) => 2 * gamma(rng, k / 2);

/** A Binomial(n, p) draw, exactly: successes counted by geometric skips (O(n·min(p, 1 − p)) draws). */
export function binomial(rng: Rng, n: number, p: number): number {
  if (p <= 0) return 0;
  if (p >= 1) return n;
  if (p > 0.5) return n - binomial(rng, n, 1 - p);
  const logQ = Math.log(1 - p);
  let k = 0;
  let i = Math.floor(Math.log(rng()) / logQ) + 1;
  while (i <= n) {
    k++;
    i += Math.floor(Math.log(rng()) / logQ) + 1;
  }
  return k;
}

/** A simulated metric: normally distributed values per user (mean) or a conversion rate (funnel). */
export type SimulatedMetric = { kind: 'mean'; mean: number; sd: number } | { kind: 'funnel'; rate: number };

export interface SimulatedVariant {
  key: string;
  /** New users exposed per day. */
  usersPerDay: number;
  /** Relative effect on each metric (by index; missing = 0): a mean or a rate times (1 + lift). */
  lift?: number[];
}

export interface SimulationSpec {
  variants: SimulatedVariant[];
  metrics: SimulatedMetric[];
  days: number;
}

/** One day's new users of one variant on one metric: n, Σx, Σx², drawn exactly from their distributions. */
function sampleDay(rng: Rng, metric: SimulatedMetric, n: number, lift: number) {
  if (n === 0) return { n, sum: 0, sumSquares: 0 };
  if (metric.kind === 'funnel') {
    const k = binomial(rng, n, Math.min(1, metric.rate * (1 + lift)));
    return { n, sum: k, sumSquares: k };
  }
  // Σx ~ N(nμ, nσ²) and, independently, Σ(x − x̄)² ~ σ²χ²(n − 1).
  const mu = metric.mean * (1 + lift);
  const sum = n * mu + metric.sd * Math.sqrt(n) * normal(rng);
  const within = n > 1 ? metric.sd ** 2 * chiSquare(rng, n - 1) : 0;
  return { n, sum, sumSquares: within + (sum * sum) / n };
}

/**
 * A simulated experiment read at `looksPerDay` evenly spaced looks a day (default 1: daily): after
 * each look's new users, `look` gets each metric's cumulative statistics per variant (the engine's
 * input: results are cumulative from the start date) and the look's index; returning true stops the
 * experiment. Users are split over the looks as evenly as whole users allow. Returns the
 * index of the look that stopped it, or −1.
 */
export function simulateLooks(
  rng: Rng,
  spec: SimulationSpec & { looksPerDay?: number },
  look: (stats: MetricStats[], index: number) => boolean | undefined,
): number {
  const perDay = spec.looksPerDay ?? 1;
  const totals = spec.metrics.map(() => spec.variants.map(() => ({ n: 0, sum: 0, sumSquares: 0 })));
  for (let index = 0; index < spec.days * perDay; index++) {
    const stats = spec.metrics.map((metric, m) => {
      const variants: VariantStats[] = spec.variants.map((v, i) => {
        const users = Math.round(((index + 1) * v.usersPerDay) / perDay) - Math.round((index * v.usersPerDay) / perDay);
        const add = sampleDay(rng, metric, users, v.lift?.[m] ?? 0);
        const t = totals[m][i];
        t.n += add.n;
        t.sum += add.sum;
        t.sumSquares += add.sumSquares;
        return { key: v.key, number_of_samples: t.n, sum: t.sum, sum_squares: t.sumSquares };
      });
      return { kind: metric.kind as MetricKind, variants };
    });
    if (look(stats, index)) return index;
  }
  return -1;
}

/** One simulated experiment: each day's cumulative statistics (simulateLooks, one look a day), as MetricStats[] per day. */
export function simulateExperiment(rng: Rng, spec: SimulationSpec): MetricStats[][] {
  const days: MetricStats[][] = [];
  simulateLooks(rng, spec, (stats) => {
    days.push(stats);
    return false;
  });
  return days;
}

/** A rate over `trials` with its binomial standard error sqrt(p(1 − p)/n). */
export function rateOf(hits: number, trials: number): { rate: number; se: number; hits: number; trials: number } {
  const rate = trials ? hits / trials : 0;
  return { rate, se: trials ? Math.sqrt((rate * (1 - rate)) / trials) : 0, hits, trials };
}

/** Whether any comparison of any metric in one day's analysis is significant (a family-wise rejection). */
export function anySignificant(analysis: ({ variant_results: Record<string, unknown>[] } | null)[]): boolean {
  return analysis.some((m) => m?.variant_results.some((v) => v.significant === true) ?? false);
}

// ---- the suites whose figures README publishes ----
export type Rate = ReturnType<typeof rateOf>;

/** The A/A experiment of the family-wise suite: control and one treatment, two mean and two funnel metrics. */
export const AA_FAMILY: SimulationSpec = {
  variants: [
    { key: 'control', usersPerDay: 2000 },
    { key: 'test', usersPerDay: 2000 },
  ],
  metrics: [
    { kind: 'mean', mean: 10, sd: 6 },
    { kind: 'funnel', rate: 0.1 },
    { kind: 'mean', mean: 2, sd: 3 },
    { kind: 'funnel', rate: 0.35 },
  ],
  days: 1,
};

/**
 * Family-wise false-positive rate of `experiments` A/A experiments analysed once at the end (fixed
 * horizon), per correction: the share of experiments where any metric × variant comparison is
 * significant at α = 0.05 (scope experiment; preferential Bonferroni with the first metric primary).
 */
export function aaFamilyWiseRates(
  experiments: number,
  seed: number,
  spec: SimulationSpec = AA_FAMILY,
): Record<CorrectionMethod, Rate> {
  const rng = seededRng(seed);
  const methods = ['none', 'holm', 'benjamini_hochberg', 'preferential_bonferroni'] as const;
  const hits = Object.fromEntries(methods.map((m) => [m, 0])) as Record<CorrectionMethod, number>;
  for (let e = 0; e < experiments; e++) {
    const days = simulateExperiment(rng, spec);
    const last = days[days.length - 1];
    for (const method of methods) {
      const settings: AnalysisSettings = {
        method: 'frequentist',
        baselineKey: 'control',
        correction: method === 'none' ? null : { method, scope: 'experiment', primary_alpha_share: 0.5 },
        primaryMetric: 0,
      };
      if (anySignificant(analyseMetrics(last, settings))) hits[method]++;
    }
  }
  return Object.fromEntries(methods.map((m) => [m, rateOf(hits[m], experiments)])) as Record<CorrectionMethod, Rate>;
}

/** The A/A experiment of the peeking suite: one metric (mean or funnel, alternately), 28 daily looks. */
export const PEEKING_DAYS = 28;
export const peekingSpec = (index: number): SimulationSpec => ({
  variants: [
    { key: 'control', usersPerDay: 500 },
    { key: 'test', usersPerDay: 500 },
  ],
  metrics: [index % 2 ? { kind: 'funnel', rate: 0.2 } : { kind: 'mean', mean: 10, sd: 6 }],
  days: PEEKING_DAYS,
});

/**
 * False-positive rate of `experiments` A/A experiments read every day and stopped at the first
 * significant result: with the fixed-horizon t-test (the peeking problem) and with sequential
 * testing (always-valid p-values), and with the fixed-horizon test read once at the end.
 */
export function peekingRates(
  experiments: number,
  seed: number,
  tuning = 5000,
): { fixedOnce: Rate; fixedPeeking: Rate; sequentialPeeking: Rate } {
  const rng = seededRng(seed);
  let once = 0;
  let peeking = 0;
  let sequential = 0;
  const fixed: AnalysisSettings = { method: 'frequentist', baselineKey: 'control' };
  const seq: AnalysisSettings = { ...fixed, sequential: { tuning_parameter: tuning } };
  for (let e = 0; e < experiments; e++) {
    const days = simulateExperiment(rng, peekingSpec(e));
    if (days.some((day) => anySignificant(analyseMetrics(day, fixed)))) peeking++;
    if (days.some((day) => anySignificant(analyseMetrics(day, seq)))) sequential++;
    if (anySignificant(analyseMetrics(days[days.length - 1], fixed))) once++;
  }
  return {
    fixedOnce: rateOf(once, experiments),
    fixedPeeking: rateOf(peeking, experiments),
    sequentialPeeking: rateOf(sequential, experiments),
  };
}

/** "4.91% ± 0.22% (491/10000)": a rate with its binomial standard error. */
export const formatRate = (r: Rate) =>
  `${(100 * r.rate).toFixed(2)}% ± ${(100 * r.se).toFixed(2)}% (${r.hits}/${r.trials})`;
