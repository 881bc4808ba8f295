// Published error rates of every statistical method of the experiment engine (issue #46 item 4):
// seeded A/A and A/B experiments of per-person data, each analysed by the engine's own function,
// counting how often an A/A experiment is called significant (false positives) and how often the
// 95% interval of an A/B experiment covers the effect the data was generated with (coverage).
// test/shared/experiments/error-rates.test.ts asserts each method's bounds and prints the table;
// `npm run -s error-rates` (scripts/error-rates.ts) prints the same table for README.
//
// The suite is a table of methods (ERROR_RATE_METHODS): each names a person model (how one arm's
// persons are drawn, with the metric multiplied by 1 + lift in the treatment, so that the true
// relative effect is the lift) and the analysis (the function under test, from the two arms' persons
// to its verdict at each look). Methods sharing a model are analysed on the same experiments, so a
// method added to the table (a new metric kind, or a new method on an existing kind) is one entry
// and changes no other row's figures. Experiments are drawn from seededRng (./simulation.ts), one
// stream per model and phase (A/A, A/B).
import type { MetricKind, VariantStats } from './moments.ts';
import { SEQUENTIAL_DEFAULT_TUNING } from './sequential.ts';
import { normalPair, type Rate, type Rng, rateOf, seededRng } from './simulation.ts';
import { type AnalysisSettings, analyseMetrics } from './stats.ts';
import { percentileComparison } from './percentile.ts';

/** One arm's persons, as columns (one value per person). */
export interface Persons {
  n: number;
  /** The metric per person: a mean metric's value, a funnel's 0/1, a ratio's numerator. */
  value: Float64Array;
  /** The same metric over the lookback window before exposure (CUPED's covariate), or null. */
  covariate: Float64Array | null;
  /** A ratio metric's denominator per person, or null. */
  denominator: Float64Array | null;
}

/** How one arm's persons are drawn. */
export interface PersonModel {
  name: string;
  /** What a person is, for the table's notes. */
  description: string;
  /** Persons per arm. */
  perArm: number;
  /** The treatment's relative effect in the A/B experiments (the true effect the intervals must cover). */
  lift: number;
  /** `n` persons whose metric is the control's times (1 + lift): a mean, a rate or a ratio of sums alike. */
  sample(rng: Rng, n: number, lift: number): Persons;
}

/** A method's reading of one experiment at one look. */
export interface Verdict {
  /** The result's `significant` flag (what the API returns and the UI labels won or lost). */
  significant: boolean;
  /** The result declares the treatment better: significant upwards (Bayesian: chance to win > 95%). */
  winner: boolean;
  /** The 95% interval of the relative effect, or null when the engine gives no result. */
  interval: readonly [number, number] | null;
}

/** [low, high]: the band a rate must fall in. */
export type Band = readonly [number, number];

export interface ErrorRateMethod {
  name: string;
  model: PersonModel;
  /** Experiments per phase (A/A, A/B); default the suite's. */
  runs?: number;
  /**
   * Read at every look (the verdicts are looks in order): a false positive is a significant result
   * at any look, coverage is the interval covering the true effect at every look with a result.
   * Otherwise one verdict, read once at the end (fixed horizon).
   */
  monitored?: boolean;
  analyse(control: Persons, test: Persons): Verdict[];
  /** What the method must show: the A/A false-positive rate (and winners declared), the A/B coverage. */
  bounds: { falsePositives: Band; winners?: Band; coverage: Band };
  /** A misuse run to show the suite sees a failure (its bounds are where the failure lands), or undefined. */
  negativeControl?: boolean;
}

export interface ErrorRateRow {
  method: string;
  model: string;
  negativeControl: boolean;
  bounds: ErrorRateMethod['bounds'];
  aa: { runs: number; falsePositives: Rate; winners: Rate; noResult: number };
  ab: { runs: number; lift: number; coverage: Rate; power: Rate; noResult: number };
}

// ---- person models ----
const columns = (n: number, covariate: boolean, denominator: boolean): Persons => ({
  n,
  value: new Float64Array(n),
  covariate: covariate ? new Float64Array(n) : null,
  denominator: denominator ? new Float64Array(n) : null,
});

/** A mean metric: a lognormal value per person (σ = 1: skewed, like revenue), its pre-period value 0.7-correlated on the log scale. */
export const ORDER_VALUE: PersonModel = {
  name: 'order value',
  description:
    'value per person lognormal (σ = 1, mean 50); CUPED covariate: the pre-period value, log-correlation 0.7',
  perArm: 1000,
  lift: 0.12,
  sample(rng, n, lift) {
    const p = columns(n, true, false);
    const sigma = 1;
    const rho = 0.7;
    const scale = 50 * Math.exp((-sigma * sigma) / 2);
    for (let i = 0; i < n; i++) {
      const [a, b] = normalPair(rng);
      p.covariate![i] = scale * Math.exp(sigma * a);
      p.value[i] = (1 + lift) * scale * Math.exp(sigma * (rho * a + Math.sqrt(1 - rho * rho) * b));
    }
    return p;
  },
};

/** A funnel metric: converted or not, 20% overall; 50% of the 30% who converted in the pre-period, 7.1% of the others. */
export const CONVERSION: PersonModel = {
  name: 'conversion',
  description:
    'converted 0/1, 20% (50% of the 30% who converted before exposure, 7.1% of the rest); covariate: that 0/1',
  perArm: 1000,
  lift: 0.2,
  sample(rng, n, lift) {
    const p = columns(n, true, false);
    const before = 0.3;
    const ifBefore = 0.5;
    const ifNot = (0.2 - before * ifBefore) / (1 - before);
    for (let i = 0; i < n; i++) {
      const x = rng() < before ? 1 : 0;
      p.covariate![i] = x;
      p.value[i] = rng() < (1 + lift) * (x ? ifBefore : ifNot) ? 1 : 0;
    }
    return p;
  },
};

/** A draw from a discrete distribution given by its cumulative probabilities (0, 1, 2, …), by inversion. */
function fromCdf(rng: Rng, cdf: Float64Array): number {
  const u = rng();
  let k = 0;
  while (k < cdf.length - 1 && u > cdf[k]) k++;
  return k;
}

/** Cumulative probabilities of k = 0, 1, … for the probabilities `p(k)`, up to `last`. */
function cumulative(last: number, p: (k: number) => number): Float64Array {
  const out = new Float64Array(last + 1);
  let total = 0;
  for (let k = 0; k <= last; k++) out[k] = total += p(k);
  out[last] = 1;
  return out;
}

const SESSIONS_MAX = 16;
/** 1 + Poisson(2): P(more than 16 sessions) < 1e-10, folded into 16. */
const EXTRA_SESSIONS_CDF = cumulative(SESSIONS_MAX - 1, (k) => {
  let p = Math.exp(-2);
  for (let i = 1; i <= k; i++) p *= 2 / i;
  return p;
});

/** A ratio metric: conversions per session; 1 + Poisson(2) sessions per person, each converting with probability 0.3. */
export const CONVERSIONS_PER_SESSION: PersonModel = {
  name: 'conversions per session',
  description: 'ratio Σ conversions / Σ sessions: 1 + Poisson(2) sessions per person, each converting with p = 0.3',
  perArm: 1000,
  lift: 0.08,
  sample(rng, n, lift) {
    const p = columns(n, false, true);
    const q = 0.3 * (1 + lift);
    // Binomial(d, q) by inversion, one table per number of sessions d.
    const conversionsCdf = Array.from({ length: SESSIONS_MAX + 1 }, (_, d) =>
      cumulative(d, (k) => {
        let c = 1;
        for (let i = 0; i < k; i++) c = (c * (d - i)) / (i + 1);
        return c * q ** k * (1 - q) ** (d - k);
      }),
    );
    for (let i = 0; i < n; i++) {
      const sessions = 1 + fromCdf(rng, EXTRA_SESSIONS_CDF);
      p.denominator![i] = sessions;
      p.value[i] = fromCdf(rng, conversionsCdf[sessions]);
    }
    return p;
  },
};

/** A retention metric: each person who did the start event is retained (completion in the window) with probability 0.3. */
export const RETENTION: PersonModel = {
  name: 'retention',
  description: 'retained 0/1 among persons who did the start event, 30%; the engine counts it as retained ÷ started',
  perArm: 1000,
  lift: 0.15,
  sample(rng, n, lift) {
    const p = columns(n, false, true);
    const q = 0.3 * (1 + lift);
    for (let i = 0; i < n; i++) {
      p.denominator![i] = 1;
      p.value[i] = rng() < q ? 1 : 0;
    }
    return p;
  },
};

// ---- from persons to the engine's input ----
/**
 * An arm's statistics as the results store them (VariantStats, ./person-state.ts's sums) over its
 * first `upto[k]` persons, for each k (in increasing order): one pass for all looks.
 */
export function armStats(
  key: string,
  persons: Persons,
  kind: MetricKind,
  cuped: boolean,
  upto: readonly number[] = [persons.n],
): VariantStats[] {
  const { value: y, covariate: x, denominator: d } = persons;
  if (cuped && !x) throw new Error('CUPED needs the covariate column');
  const ratio = kind === 'ratio' || kind === 'retention';
  if (ratio && !d) throw new Error('a ratio needs the denominator column');
  let sum = 0;
  let sumSquares = 0;
  let xSum = 0;
  let xSquares = 0;
  let xy = 0;
  let dSum = 0;
  let dSquares = 0;
  let md = 0;
  const out: VariantStats[] = [];
  let i = 0;
  for (const end of upto) {
    for (; i < end; i++) {
      const v = y[i];
      sum += v;
      sumSquares += v * v;
      if (cuped) {
        const c = x![i];
        xSum += c;
        xSquares += c * c;
        xy += c * v;
      }
      if (ratio) {
        const e = d![i];
        dSum += e;
        dSquares += e * e;
        md += v * e;
      }
    }
    const stats: VariantStats = { key, number_of_samples: end, sum, sum_squares: sumSquares };
    if (cuped)
      Object.assign(stats, { covariate_sum: xSum, covariate_sum_squares: xSquares, covariate_sum_product: xy });
    if (ratio)
      Object.assign(stats, {
        denominator_sum: dSum,
        denominator_sum_squares: dSquares,
        numerator_denominator_sum_product: md,
      });
    out.push(stats);
  }
  return out;
}

const ALPHA = 0.05;

/** The engine's verdict (analyseMetrics, as the results job calls it) on one look's statistics. */
function engineVerdict(
  kind: MetricKind,
  settings: Omit<AnalysisSettings, 'baselineKey'>,
  control: VariantStats,
  test: VariantStats,
): Verdict {
  const [analysis] = analyseMetrics([{ kind, variants: [control, test] }], {
    ...settings,
    alpha: ALPHA,
    baselineKey: 'control',
  });
  const v = analysis!.variant_results[0];
  const interval = (v.confidence_interval ?? v.credible_interval ?? null) as [number, number] | null;
  const significant = v.significant === true;
  const winner =
    settings.method === 'bayesian'
      ? typeof v.chance_to_win === 'number' && v.chance_to_win > 1 - ALPHA
      : significant && !!interval && interval[0] > 0;
  return { significant, winner, interval };
}

/** Every `step` persons per arm, up to n (and n itself). */
const looksEvery = (step: number, n: number) => {
  const looks: number[] = [];
  for (let k = step; k < n; k += step) looks.push(k);
  looks.push(n);
  return looks;
};

// ---- the methods ----
const FIXED_FP: Band = [0.04, 0.06];
const COVERAGE: Band = [0.94, 0.96];
/** Bayesian `significant` (PostHog's is_decisive): chance to win > 95% or < 5%, two-sided 10% under A/A by design. */
const BAYES_FLAG_FP: Band = [0.09, 0.11];
/**
 * Bayesian winners (chance to win > 95%) under A/A: 5% if the posterior were symmetric about the
 * truth; the relative effect's plug-in variance grows with the treatment's mean, so on skewed data
 * and rates the rule is lopsided (fewer false winners, more false losers: 3.9–4.6% winners here).
 * Asserted: at most the nominal 5% plus Monte-Carlo error, and not so few that the rule is dead.
 */
const BAYES_WINNERS: Band = [0.03, 0.06];
/** Sequential testing's own bound: at most α over any number of looks, intervals covering at every look. */
const SEQUENTIAL_FP: Band = [0, 0.05];
const SEQUENTIAL_COVERAGE: Band = [0.95, 1];
/** Persons per arm between two looks of a monitored experiment (50 looks over 1,000 per arm). */
export const LOOK_EVERY = 20;
/** Experiments per phase of the monitored methods, and of the negative control (which fails by far). */
export const MONITORED_RUNS = 4000;
const CONTROL_RUNS = 2000;

const fixedMethod = (
  model: PersonModel,
  kind: MetricKind,
  method: 'frequentist' | 'bayesian',
  cuped: boolean,
): ErrorRateMethod => ({
  name: `${kind} · ${method === 'bayesian' ? 'Bayesian' : 'frequentist'}${cuped ? ' · CUPED' : ''}`,
  model,
  analyse: (c, t) => [
    engineVerdict(kind, { method }, armStats('control', c, kind, cuped)[0], armStats('test', t, kind, cuped)[0]),
  ],
  bounds:
    method === 'bayesian'
      ? { falsePositives: BAYES_FLAG_FP, winners: BAYES_WINNERS, coverage: COVERAGE }
      : { falsePositives: FIXED_FP, coverage: COVERAGE },
});

/** Read after every LOOK_EVERY persons per arm: sequential testing, or (negative control) the fixed-horizon test. */
const monitoredMethod = (
  model: PersonModel,
  kind: MetricKind,
  cuped: boolean,
  sequential: boolean,
): ErrorRateMethod => ({
  name: sequential
    ? `${kind} · sequential${cuped ? ' · CUPED' : ''}`
    : `${kind} · frequentist read at every look (misuse)`,
  model,
  runs: sequential ? MONITORED_RUNS : CONTROL_RUNS,
  monitored: true,
  negativeControl: !sequential,
  analyse: (c, t) => {
    const looks = looksEvery(LOOK_EVERY, Math.min(c.n, t.n));
    const control = armStats('control', c, kind, cuped, looks);
    const test = armStats('test', t, kind, cuped, looks);
    const settings: Omit<AnalysisSettings, 'baselineKey'> = sequential
      ? { method: 'frequentist', sequential: { tuning_parameter: SEQUENTIAL_DEFAULT_TUNING } }
      : { method: 'frequentist' };
    return looks.map((_, k) => engineVerdict(kind, settings, control[k], test[k]));
  },
  bounds: sequential
    ? { falsePositives: SEQUENTIAL_FP, coverage: SEQUENTIAL_COVERAGE }
    : // Where peeking at a fixed-horizon test lands: far above α, intervals missing at some look.
      { falsePositives: [0.15, 1], coverage: [0, 0.85] },
});

/**
 * A percentile metric (percentile.ts, the outer interval of Deng, Knoblich & Lu) on the order values:
 * the treatment's values are the control's times (1 + lift), so every percentile moves by the lift.
 */
const percentileMethod = (percentile: number, method: 'frequentist' | 'bayesian'): ErrorRateMethod => ({
  name: `percentile P${Math.round(percentile * 100)} · ${method === 'bayesian' ? 'Bayesian' : 'frequentist'}`,
  model: ORDER_VALUE,
  analyse: (c, t) => {
    const result = percentileComparison(
      [
        { key: 'control', values: c.value },
        { key: 'test', values: t.value },
      ],
      { percentile, baselineKey: 'control', method, alpha: ALPHA },
    );
    const v = result.variant_results[0];
    const interval = (v.confidence_interval ?? v.credible_interval ?? null) as [number, number] | null;
    const significant = v.significant === true;
    const winner =
      method === 'bayesian'
        ? typeof v.chance_to_win === 'number' && v.chance_to_win > 1 - ALPHA
        : significant && !!interval && interval[0] > 0;
    return [{ significant, winner, interval }];
  },
  // Its Bayesian reading is the same normal approximation as a flat-prior posterior: `significant` is
  // the credible interval excluding 0 (two-sided 5%), not PostHog's chance-to-win rule.
  bounds:
    method === 'bayesian'
      ? { falsePositives: FIXED_FP, winners: BAYES_WINNERS, coverage: COVERAGE }
      : { falsePositives: FIXED_FP, coverage: COVERAGE },
});

/**
 * Every method of the engine: mean, funnel, ratio, retention and percentile metrics, frequentist and Bayesian, with and
 * without CUPED where the engine applies it (mean and funnel; PostHog applies none to ratios or
 * retention), and
 * sequential testing (mean and funnel, the kinds the API allows it on), plus one negative control.
 */
export const ERROR_RATE_METHODS: ErrorRateMethod[] = [
  ...(
    [
      [ORDER_VALUE, 'mean', true],
      [CONVERSION, 'funnel', true],
      [CONVERSIONS_PER_SESSION, 'ratio', false],
      [RETENTION, 'retention', false],
    ] as const
  ).flatMap(([model, kind, cuped]) =>
    (['frequentist', 'bayesian'] as const).flatMap((method) => [
      fixedMethod(model, kind, method, false),
      ...(cuped ? [fixedMethod(model, kind, method, true)] : []),
    ]),
  ),
  percentileMethod(0.5, 'frequentist'),
  percentileMethod(0.9, 'frequentist'),
  percentileMethod(0.9, 'bayesian'),
  monitoredMethod(ORDER_VALUE, 'mean', false, true),
  monitoredMethod(ORDER_VALUE, 'mean', true, true),
  monitoredMethod(CONVERSION, 'funnel', false, true),
  monitoredMethod(ORDER_VALUE, 'mean', false, false),
];

/** Experiments per phase of the read-once methods, and the seed. */
export const ERROR_RATE_RUNS = 10_000;
export const ERROR_RATE_SEED = 20261129;

/** FNV-1a of a string: a model's and phase's stream of the seed. */
function hash(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193);
  return h >>> 0;
}

/**
 * Runs every method's A/A and A/B experiments (`runs` each unless the method says otherwise) and
 * returns a row per method, in the table's order. `progress` is told after each model's phase.
 */
export function errorRates(
  methods: readonly ErrorRateMethod[] = ERROR_RATE_METHODS,
  options: { runs?: number; seed?: number; progress?: (message: string) => void } = {},
): ErrorRateRow[] {
  const runsOf = (m: ErrorRateMethod) => Math.min(m.runs ?? Number.POSITIVE_INFINITY, options.runs ?? ERROR_RATE_RUNS);
  const seed = options.seed ?? ERROR_RATE_SEED;
  const tallies = new Map(methods.map((m) => [m, { fp: 0, win: 0, aaNone: 0, covered: 0, power: 0, abNone: 0 }]));
  for (const model of new Set(methods.map((m) => m.model))) {
    const group = methods.filter((m) => m.model === model);
    const runs = Math.max(...group.map(runsOf));
    for (const phase of ['A/A', 'A/B'] as const) {
      const rng = seededRng(seed ^ hash(`${model.name}\u0000${phase}`));
      const lift = phase === 'A/B' ? model.lift : 0;
      for (let r = 0; r < runs; r++) {
        const control = model.sample(rng, model.perArm, 0);
        const test = model.sample(rng, model.perArm, lift);
        for (const method of group) {
          if (r >= runsOf(method)) continue;
          const t = tallies.get(method)!;
          const looks = method.analyse(control, test);
          const last = looks[looks.length - 1];
          if (phase === 'A/A') {
            if (looks.some((v) => v.significant)) t.fp++;
            if (looks.some((v) => v.winner)) t.win++;
            if (!last.interval) t.aaNone++;
          } else {
            const covers = (v: Verdict) => !!v.interval && v.interval[0] <= lift && lift <= v.interval[1];
            const read = method.monitored ? looks.filter((v) => v.interval) : [last];
            if (read.length && read.every(covers)) t.covered++;
            if (looks.some((v) => v.winner)) t.power++;
            if (!last.interval) t.abNone++;
          }
        }
      }
      options.progress?.(`${model.name} ${phase}: ${runs} experiments`);
    }
  }
  return methods.map((m) => {
    const t = tallies.get(m)!;
    const runs = runsOf(m);
    return {
      method: m.name,
      model: m.model.name,
      negativeControl: !!m.negativeControl,
      bounds: m.bounds,
      aa: { runs, falsePositives: rateOf(t.fp, runs), winners: rateOf(t.win, runs), noResult: t.aaNone },
      ab: {
        runs,
        lift: m.model.lift,
        coverage: rateOf(t.covered, runs),
        power: rateOf(t.power, runs),
        noResult: t.abNone,
      },
    };
  });
}

/** Whether a row's rates lie in its method's bounds (a negative control: where its failure must land). */
export function withinBounds(row: ErrorRateRow): { falsePositives: boolean; winners: boolean; coverage: boolean } {
  const inside = (rate: number, [lo, hi]: Band) => rate >= lo && rate <= hi;
  return {
    falsePositives: inside(row.aa.falsePositives.rate, row.bounds.falsePositives),
    winners: !row.bounds.winners || inside(row.aa.winners.rate, row.bounds.winners),
    coverage: inside(row.ab.coverage.rate, row.bounds.coverage),
  };
}

const pct = (x: number, digits = 2) => `${(100 * x).toFixed(digits)}%`;
const band = ([lo, hi]: Band) =>
  lo === 0 ? `≤ ${pct(hi, 0)}` : hi === 1 ? `≥ ${pct(lo, 0)}` : `${pct(lo, 0)}–${pct(hi, 0)}`;

/** The rows as a markdown table (the one README publishes), with the models' descriptions under it. */
export function errorRateTable(rows: readonly ErrorRateRow[], methods = ERROR_RATE_METHODS): string {
  const lines = [
    '| method | A/A runs | false positives: `significant` (bound) | false winners (bound) | A/B runs, true lift | 95% interval covers the lift (bound) | power |',
    '|---|---|---|---|---|---|---|',
  ];
  for (const r of rows) {
    const fp = `${pct(r.aa.falsePositives.rate)} ± ${pct(r.aa.falsePositives.se)} (${band(r.bounds.falsePositives)})`;
    const win = `${pct(r.aa.winners.rate)}${r.bounds.winners ? ` (${band(r.bounds.winners)})` : ''}`;
    const cov = `${pct(r.ab.coverage.rate)} ± ${pct(r.ab.coverage.se)} (${band(r.bounds.coverage)})`;
    const name = r.negativeControl ? `${r.method} — control, must fail` : r.method;
    const ab = `${r.ab.runs.toLocaleString('en')}, +${Math.round(100 * r.ab.lift)}%`;
    lines.push(
      `| ${name} | ${r.aa.runs.toLocaleString('en')} | ${fp} | ${win} | ${ab} | ${cov} | ${pct(r.ab.power.rate, 1)} |`,
    );
  }
  const models = [...new Set(methods.map((m) => m.model))];
  lines.push(
    '',
    ...models.map((m) => `- ${m.name} (${m.perArm.toLocaleString('en')} persons per arm): ${m.description}`),
  );
  return lines.join('\n');
}
