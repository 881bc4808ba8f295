import { describe, expect, it } from 'vitest';
import {
  analyseMetrics,
  benjaminiHochbergAdjust,
  chiSquareSurvival,
  compareVariants,
  cupedAdjust,
  cupedTheta,
  holmAdjust,
  type MetricStats,
  normalCdf,
  normalQuantile,
  sampleRatioMismatch,
  studentTCdf,
  studentTQuantile,
} from '../../../shared/experiments/stats.ts';

/** A comparison as compareVariants returns it: the fields these tests read. */
type Compared = {
  key: string;
  number_of_samples: number;
  p_value: number;
  unadjusted_p_value: number;
  adjusted_alpha: number;
  confidence_interval: [number, number];
  chance_to_win: number;
  credible_interval: [number, number];
  significant: boolean;
  validation_failures: string[];
};

describe('numerical functions (reference values)', () => {
  it('normal CDF and quantile', () => {
    expect(normalCdf(0)).toBeCloseTo(0.5, 7);
    expect(normalCdf(1.96)).toBeCloseTo(0.9750021, 6);
    expect(normalCdf(-1)).toBeCloseTo(0.1586553, 6);
    expect(normalQuantile(0.975)).toBeCloseTo(1.959964, 5);
    expect(normalQuantile(0.05)).toBeCloseTo(-1.644854, 5);
  });
  it('Student t CDF and quantile', () => {
    expect(studentTCdf(2.228139, 10)).toBeCloseTo(0.975, 5); // t table: df 10, two-sided 5%
    expect(studentTCdf(-1.812461, 10)).toBeCloseTo(0.05, 5);
    expect(studentTQuantile(0.975, 30)).toBeCloseTo(2.042272, 4);
  });
});

describe('compareVariants', () => {
  // Control: 1000 users, 100 converted; test: 1000 users, 130 converted (funnel = proportions).
  const funnel = [
    { key: 'control', number_of_samples: 1000, sum: 100, sum_squares: 100 },
    { key: 'test', number_of_samples: 1000, sum: 130, sum_squares: 130 },
  ];
  it('Bayesian: relative lift 30%, chance to win by hand', () => {
    const r = compareVariants(funnel, 'control', 'funnel', 'bayesian');
    const v = r.variant_results[0] as Compared;
    // θ = 0.13/0.10 − 1 = 0.3; V = 0.13·0.87/(1000·0.01) + 0.13²·0.09/(1000·0.0001) = 0.01131 + 0.01521 = 0.02652
    const sd = Math.sqrt(0.02652);
    expect(v.chance_to_win).toBeCloseTo(normalCdf(0.3 / sd), 6);
    expect(v.chance_to_win).toBeCloseTo(0.9671, 3);
    expect(v.credible_interval[0]).toBeCloseTo(0.3 - 1.959964 * sd, 4);
    expect(v.significant).toBe(true);
  });
  it('frequentist: Welch t-test on the relative effect', () => {
    const v = compareVariants(funnel, 'control', 'funnel', 'frequentist').variant_results[0] as Compared;
    // t = 0.3 / sqrt(0.02652) = 1.8422; df from raw variances a = 0.0001131, b = 0.00009
    const a = 0.1131 / 1000;
    const b = 0.09 / 1000;
    const df = (a + b) ** 2 / (a ** 2 / 999 + b ** 2 / 999);
    expect(v.p_value).toBeCloseTo(2 * (1 - studentTCdf(0.3 / Math.sqrt(0.02652), df)), 8);
    expect(v.p_value).toBeCloseTo(0.0656, 3);
    expect(v.significant).toBe(false);
  });
  it('withholds statistics below 50 exposures', () => {
    const v = compareVariants(
      [
        { key: 'control', number_of_samples: 10, sum: 5, sum_squares: 5 },
        { key: 'test', number_of_samples: 10, sum: 6, sum_squares: 6 },
      ],
      'control',
      'mean',
      'bayesian',
    ).variant_results[0] as Compared;
    expect(v.validation_failures).toEqual(['NOT_ENOUGH_EXPOSURES']);
    expect(v.chance_to_win).toBeNull();
  });
});

// Relative error, for p-values that span many orders of magnitude.
const relative = (a: number, b: number) => Math.abs(a - b) / Math.abs(b);

describe('sample ratio mismatch (PostHog: chi-square, p < 0.001, from 100 exposures)', () => {
  it('chi-square survival function against scipy.stats.chi2.sf', () => {
    // scipy 1.17: chisquare([90,10],[50,50]), ([200,100],[150,150]), ([130,170,80], 30/50/20 of 380)
    expect(relative(chiSquareSurvival(64, 1), 1.2441921148543578e-15)).toBeLessThan(1e-9);
    expect(relative(chiSquareSurvival(100 / 3, 1), 7.764036537930667e-9)).toBeLessThan(1e-9);
    expect(relative(chiSquareSurvival(4.561403508771929, 2), 0.10221245350436987)).toBeLessThan(1e-9);
    expect(relative(chiSquareSurvival(7.5, 3), 0.0575584519726364)).toBeLessThan(1e-9);
    expect(relative(chiSquareSurvival(250, 4), 6.509689997375721e-53)).toBeLessThan(1e-8);
    expect(relative(chiSquareSurvival(0.3, 5), 0.9976430862605289)).toBeLessThan(1e-9);
    expect(chiSquareSurvival(0, 1)).toBe(1);
  });
  const half = { control: 50, test: 50 };
  it("PostHog's golden cases (test_experiment_exposures_query_runner.py)", () => {
    // Balanced 50/50: p = 1.0 exactly, expected 50/50.
    expect(sampleRatioMismatch({ control: 50, test: 50 }, half)).toEqual({
      expected: { control: 50, test: 50 },
      observed: { control: 50, test: 50 },
      p_value: 1,
      warning: false,
    });
    // 90/10 on 50/50: far below 0.001.
    const skewed = sampleRatioMismatch({ control: 90, test: 10 }, half)!;
    expect(skewed.expected).toEqual({ control: 50, test: 50 });
    expect(skewed.p_value).toBeLessThan(0.001);
    expect(relative(skewed.p_value, 1.2441921148543578e-15)).toBeLessThan(1e-9);
    expect(skewed.warning).toBe(true);
    // 80 exposures in all: not computed.
    expect(sampleRatioMismatch({ control: 40, test: 40 }, half)).toBeNull();
    // A variant with no exposures but half the rollout.
    expect(sampleRatioMismatch({ control: 100, test: 0 }, half)!.p_value).toBeLessThan(0.001);
    // A 0% variant is left out (also when it has exposures): expected over the others only.
    const zero = sampleRatioMismatch({ control: 50, test: 50, disabled: 7 }, { ...half, disabled: 0 })!;
    expect(Object.keys(zero.expected)).toEqual(['control', 'test']);
    expect(zero.p_value).toBe(1);
  });
  it('uneven rollouts and a holdout renormalise the expected counts', () => {
    const r = sampleRatioMismatch({ control: 130, a: 170, b: 80 }, { control: 30, a: 50, b: 20 })!;
    expect(r.expected.control).toBeCloseTo(114, 10);
    expect(r.expected.a).toBeCloseTo(190, 10);
    expect(relative(r.p_value, 0.10221245350436987)).toBeLessThan(1e-9);
    expect(r.warning).toBe(false);
    // 20% holdout: control/test at 40/40 of the exposed users, i.e. still 50/50 among them.
    expect(sampleRatioMismatch({ control: 40, test: 60 }, { control: 40, test: 40 })!.expected).toEqual(half);
    // The threshold: 200/100 on 50/50 warns (p ≈ 7.8e-9); 160/140 does not (p ≈ 0.25).
    expect(sampleRatioMismatch({ control: 200, test: 100 }, half)!.warning).toBe(true);
    expect(sampleRatioMismatch({ control: 160, test: 140 }, half)!.warning).toBe(false);
  });
  it('every analysed metric carries the SRM of its exposures', () => {
    const [m] = analyseMetrics(
      [
        {
          kind: 'funnel',
          variants: [
            { key: 'control', number_of_samples: 200, sum: 20, sum_squares: 20 },
            { key: 'test', number_of_samples: 100, sum: 12, sum_squares: 12 },
          ],
        },
      ],
      { method: 'bayesian', baselineKey: 'control', rollout: half },
    );
    expect(m!.sample_ratio_mismatch).toMatchObject({ expected: { control: 150, test: 150 }, warning: true });
    expect(relative(m!.sample_ratio_mismatch!.p_value, 7.764036537930667e-9)).toBeLessThan(1e-9);
  });
});

describe('multiple-comparison correction', () => {
  it('Holm and Benjamini-Hochberg adjusted p-values (R p.adjust / scipy false_discovery_control)', () => {
    const p = [0.001, 0.01, 0.04, 0.2, 0.5];
    // R: p.adjust(p, "holm") = 0.005 0.040 0.120 0.400 0.500
    const close = (actual: number[], expected: number[]) => {
      for (const [i, v] of actual.entries()) expect(v).toBeCloseTo(expected[i], 12);
    };
    close(holmAdjust(p), [0.005, 0.04, 0.12, 0.4, 0.5]);
    // scipy: [0.005, 0.025, 0.06666667, 0.25, 0.5]
    close(benjaminiHochbergAdjust(p), [0.005, 0.025, 0.2 / 3, 0.25, 0.5]);
    // Order is kept and ties are handled.
    expect(holmAdjust([0.04, 0.01, 0.04])).toEqual([0.08, 0.03, 0.08]);
    expect(benjaminiHochbergAdjust([0.04, 0.01, 0.04])).toEqual([0.04, 0.03, 0.04]);
  });

  // Two metrics × two treatments; conversion 10% in control.
  const funnel = (a: number, b: number): MetricStats => ({
    kind: 'funnel',
    variants: [
      { key: 'control', number_of_samples: 2000, sum: 200, sum_squares: 200 },
      { key: 'a', number_of_samples: 2000, sum: a, sum_squares: a },
      { key: 'b', number_of_samples: 2000, sum: b, sum_squares: b },
    ],
  });
  const metrics = [funnel(245, 205), funnel(290, 210)];
  const raw = analyseMetrics(metrics, { method: 'frequentist', baselineKey: 'control' });
  const rawP = raw.flatMap((m) => m!.variant_results.map((v) => v.p_value as number));

  it('a borderline win is no longer significant after correction, and its interval then covers zero', () => {
    const borderline = raw[0]!.variant_results[0] as Compared;
    expect(borderline.p_value).toBeGreaterThan(0.01);
    expect(borderline.p_value).toBeLessThan(0.05);
    expect(borderline.significant).toBe(true);
    const [m] = analyseMetrics(metrics, {
      method: 'frequentist',
      baselineKey: 'control',
      correction: { method: 'holm', scope: 'experiment', primary_alpha_share: 0.5 },
    });
    const v = m!.variant_results[0] as Compared;
    expect(v.unadjusted_p_value).toBe(borderline.p_value);
    expect(v.p_value).toBeCloseTo(holmAdjust(rawP)[0], 12);
    expect(v.p_value).toBeGreaterThan(0.05);
    expect(v.significant).toBe(false);
    expect(v.confidence_interval[0]).toBeLessThan(0);
    expect(v.confidence_interval[0]).toBeLessThan(borderline.confidence_interval[0]); // wider
    expect(m!.multiple_comparison_correction).toEqual({
      method: 'holm',
      scope: 'experiment',
      alpha: 0.05,
      family_size: 4,
    });
    // The strong effect of the second metric stays significant.
    expect(
      analyseMetrics(metrics, {
        method: 'frequentist',
        baselineKey: 'control',
        correction: { method: 'holm', scope: 'experiment', primary_alpha_share: 0.5 },
      })[1]!.variant_results[0].significant,
    ).toBe(true);
  });

  it('scope: per metric, each metric is its own family', () => {
    const out = analyseMetrics(metrics, {
      method: 'frequentist',
      baselineKey: 'control',
      correction: { method: 'benjamini_hochberg', scope: 'metric', primary_alpha_share: 0.5 },
    });
    const expected = [...benjaminiHochbergAdjust(rawP.slice(0, 2)), ...benjaminiHochbergAdjust(rawP.slice(2))];
    for (const [i, v] of out.flatMap((m) => m!.variant_results).entries())
      expect(v.p_value).toBeCloseTo(expected[i], 12);
    expect(out[0]!.multiple_comparison_correction!.family_size).toBe(2);
  });

  it('preferential Bonferroni: γ·α/k to the primary metric, (1 − γ)·α/(k(m − 1)) to the others', () => {
    const out = analyseMetrics(metrics, {
      method: 'frequentist',
      baselineKey: 'control',
      primaryMetric: 1,
      correction: { method: 'preferential_bonferroni', scope: 'experiment', primary_alpha_share: 0.6 },
    });
    const [secondary, primary] = out.map((m) => m!.variant_results as Compared[]);
    expect(primary[0].adjusted_alpha).toBeCloseTo((0.6 * 0.05) / 2, 15);
    expect(secondary[0].adjusted_alpha).toBeCloseTo((0.4 * 0.05) / 2, 15);
    expect(primary[1].p_value).toBeCloseTo(Math.min(1, rawP[3] / 0.3), 12);
    expect(secondary[0].p_value).toBeCloseTo(Math.min(1, rawP[0] / 0.2), 12);
    // The interval is at the comparison's own level: its half-width grows with the t quantile.
    const widen = studentTQuantile(1 - 0.01 / 2, 1e6) / studentTQuantile(1 - 0.05 / 2, 1e6);
    const w = (v: Compared) => v.confidence_interval[1] - v.confidence_interval[0];
    expect(w(secondary[0]) / w(raw[0]!.variant_results[0] as Compared)).toBeCloseTo(widen, 2);
  });

  it('the significant label always agrees with the interval and with the adjusted p-value', () => {
    let seed = 7;
    const rand = () => {
      seed = (seed * 16807) % 2147483647;
      return seed / 2147483647;
    };
    for (const method of ['holm', 'benjamini_hochberg', 'preferential_bonferroni'] as const) {
      for (const scope of ['experiment', 'metric'] as const) {
        for (let round = 0; round < 40; round++) {
          const ms = Array.from({ length: 1 + Math.floor(rand() * 4) }, () =>
            funnel(200 + Math.floor(rand() * 90) - 20, 200 + Math.floor(rand() * 90) - 20),
          );
          const out = analyseMetrics(ms, {
            method: 'frequentist',
            baselineKey: 'control',
            correction: { method, scope, primary_alpha_share: 0.5 },
          });
          for (const v of out.flatMap((m) => m!.variant_results) as Compared[]) {
            const excludesZero = v.confidence_interval[0] > 0 || v.confidence_interval[1] < 0;
            expect(v.significant).toBe(excludesZero);
            expect(v.significant).toBe(v.p_value < 0.05);
          }
        }
      }
    }
  });

  it('leaves Bayesian results alone', () => {
    const out = analyseMetrics(metrics, {
      method: 'bayesian',
      baselineKey: 'control',
      correction: { method: 'holm', scope: 'experiment', primary_alpha_share: 0.5 },
    });
    expect(out[0]!.multiple_comparison_correction).toBeNull();
    expect(out[0]!.variant_results[0].p_value).toBeUndefined();
  });
});

describe('CUPED (golden values of PostHog’s stats/tests/test_cuped.py, TestCupedReferenceData)', () => {
  const v = (key: string, n: number, sum: number, ss: number, x: number, xx: number, xy: number) => ({
    key,
    number_of_samples: n,
    sum,
    sum_squares: ss,
    covariate_sum: x,
    covariate_sum_squares: xx,
    covariate_sum_product: xy,
  });
  const control = v('control', 2801, 280, 560, 195, 390, -18);
  const treatment = v('test', 2800, 205, 510, 110, 380, -8);

  it('theta and adjusted groups', () => {
    const small = v('a', 5, 14, 48, 28.5, 520.3, 85.2);
    expect(cupedTheta(small, small)).toBeCloseTo(0.015090122, 7);
    expect(cupedAdjust(small, 'mean', 0).mean).toBeCloseTo(2.8, 9);
    expect(cupedAdjust(small, 'mean', 0).variance).toBeCloseTo(2.2, 9);
    expect(cupedAdjust(small, 'mean', 0.31).mean).toBeCloseTo(1.033, 5);
    expect(cupedAdjust(small, 'mean', 0.31).variance).toBeCloseTo(9.960346, 4);
    expect(cupedAdjust(v('one', 1, 8, 64, 15.3, 15.3 ** 2, 50), 'mean', 0.4).variance).toBe(0);
    const theta = cupedTheta(treatment, control);
    expect(theta).toBeCloseTo(-0.069566052, 7);
    expect(cupedAdjust(control, 'mean', theta).mean).toBeCloseTo(0.104807347, 7);
    expect(cupedAdjust(treatment, 'mean', theta).mean).toBeCloseTo(0.075947238, 7);
  });

  it('three arms: each treatment’s theta from its pair with the control', () => {
    const t2 = v('t2', 3500, 420, 840, 280, 560, -25);
    const sd = (g: Parameters<typeof cupedAdjust>[0], thetaC: number) =>
      Math.sqrt(cupedAdjust(g, 'mean', thetaC).variance);
    expect(sd(control, cupedTheta(t2, control))).toBeCloseTo(0.434365539, 5);
    expect(sd(treatment, cupedTheta(treatment, control))).toBeCloseTo(0.420353709, 5);
    expect(sd(t2, cupedTheta(t2, control))).toBeCloseTo(0.473119119, 5);
  });

  it('relative effect over the unadjusted control mean: PostHog’s estimate, the delta method’s interval', () => {
    // PostHog's test gives the interval [−0.486775, −0.090633] (Bayesian [−0.486732, −0.090676]):
    // its variance is the unadjusted formula on the adjusted moments, the control's term scaled by
    // (adjT/ȳC)² — wrong when the covariate is strong (13.5–14.7% false positives at α = 0.05 in
    // test/shared/experiments/error-rates.test.ts). Ours is the delta method of (adjT − adjC)/ȳC with
    // adjC and ȳC from the same persons, computed here as g'Σg by hand; the estimate is PostHog's.
    const f = compareVariants([control, treatment], 'control', 'mean', 'frequentist').variant_results[0] as Compared;
    const [lo, hi] = f.confidence_interval;
    expect((lo + hi) / 2).toBeCloseTo(-0.288704169, 5);
    const thetaC = cupedTheta(treatment, control);
    const group = (g: typeof control) => {
      const n = g.number_of_samples;
      const y = g.sum / n;
      const x = g.covariate_sum / n;
      const s2y = (g.sum_squares - n * y * y) / (n - 1);
      const s2x = (g.covariate_sum_squares - n * x * x) / (n - 1);
      const cov = (g.covariate_sum_product - n * x * y) / (n - 1);
      return { n, y, adj: y - thetaC * x, s2y, cov, s2adj: s2y + thetaC ** 2 * s2x - 2 * thetaC * cov };
    };
    const [t, c] = [group(treatment), group(control)];
    const estimate = (t.adj - c.adj) / c.y;
    // Gradient over (adjT, adjC, ȳC) and their covariance (adjT independent of the control's two).
    const g = [1 / c.y, -1 / c.y, -estimate / c.y];
    const varAdjT = t.s2adj / t.n;
    const varAdjC = c.s2adj / c.n;
    const varU = c.s2y / c.n;
    const covAdjCU = (c.s2y - thetaC * c.cov) / c.n;
    const variance = g[0] ** 2 * varAdjT + g[1] ** 2 * varAdjC + g[2] ** 2 * varU + 2 * g[1] * g[2] * covAdjCU;
    const df = (varAdjT + varAdjC) ** 2 / (varAdjT ** 2 / (t.n - 1) + varAdjC ** 2 / (c.n - 1));
    const q = studentTQuantile(0.975, df);
    expect(lo).toBeCloseTo(estimate - q * Math.sqrt(variance), 9);
    expect(hi).toBeCloseTo(estimate + q * Math.sqrt(variance), 9);
    expect([lo, hi].map((e) => Number(e.toFixed(6)))).toEqual([-0.482034, -0.095375]);
    expect(f.significant).toBe(true);
    const b = compareVariants([control, treatment], 'control', 'mean', 'bayesian').variant_results[0] as Compared;
    const z = normalQuantile(0.975);
    expect(b.credible_interval[0]).toBeCloseTo(estimate - z * Math.sqrt(variance), 9);
    expect(b.credible_interval[1]).toBeCloseTo(estimate + z * Math.sqrt(variance), 9);
  });

  it('a binary (funnel) outcome with a 0/1 covariate is adjusted too', () => {
    const c = v('control', 2801, 280, 280, 195, 195, -18);
    const t = v('test', 2800, 205, 205, 110, 110, -8);
    const r = compareVariants([c, t], 'control', 'funnel', 'frequentist').variant_results[0] as Compared;
    expect(r.significant).toBe(true);
    expect(r.confidence_interval[1]).toBeLessThan(0);
  });
});

describe('ratio metrics (PostHog: RatioStatistic, delta-method variance)', () => {
  // PostHog's stats/tests/test_frequentist.py, test_two_sided_ttest_with_ratio_statistic: revenue per
  // purchase, each person's purchases (0/1) as the denominator, so Σd² = Σd and Σm·d = Σm.
  const ratio = [
    {
      key: 'test',
      number_of_samples: 2034,
      sum: 99673.9364269569,
      sum_squares: 11298745.182728939,
      denominator_sum: 947,
      denominator_sum_squares: 947,
      numerator_denominator_sum_product: 99673.9364269569,
    },
    {
      key: 'control',
      number_of_samples: 1966,
      sum: 94605.79858780127,
      sum_squares: 10463129.505392816,
      denominator_sum: 936,
      denominator_sum_squares: 936,
      numerator_denominator_sum_product: 94605.79858780127,
    },
  ];
  it('frequentist: PostHog’s golden values (test_two_sided_ttest_with_ratio_statistic)', () => {
    const v = compareVariants(ratio, 'control', 'ratio', 'frequentist').variant_results[0] as Compared & {
      validation_failures: string[];
    };
    expect(v.validation_failures).toEqual([]);
    // PostHog asserts these to 4 places; they are given to 6–7 significant digits.
    expect(v.confidence_interval[0]).toBeCloseTo(0.01378609, 6);
    expect(v.p_value).toBeCloseTo(0.0032826, 6);
    expect(v.confidence_interval[1]).toBeCloseTo(0.0689, 4);
    expect((v.confidence_interval[0] + v.confidence_interval[1]) / 2).toBeCloseTo(0.041333, 6);
    expect(v.significant).toBe(true);
  });
  it('the ratio and its delta-method variance by hand', () => {
    // R = Σm/Σd; Var = s²m/d̄² + m̄²·s²d/d̄⁴ − 2m̄·cov/d̄³ (per person), the relative effect's variance
    // Var_T/(n_T·R_C²) + R_T²·Var_C/(n_C·R_C⁴), as for a mean.
    const stat = (v: (typeof ratio)[number]) => {
      const n = v.number_of_samples;
      const m = v.sum / n;
      const d = v.denominator_sum / n;
      const sm = (v.sum_squares - v.sum ** 2 / n) / (n - 1);
      const sd = (v.denominator_sum_squares - v.denominator_sum ** 2 / n) / (n - 1);
      const cov = (v.numerator_denominator_sum_product - (v.sum * v.denominator_sum) / n) / (n - 1);
      return {
        n,
        r: v.sum / v.denominator_sum,
        variance: sm / d ** 2 + (m ** 2 * sd) / d ** 4 - (2 * m * cov) / d ** 3,
      };
    };
    const t = stat(ratio[0]);
    const c = stat(ratio[1]);
    const theta = (t.r - c.r) / c.r;
    const variance = t.variance / (t.n * c.r ** 2) + (t.r ** 2 * c.variance) / (c.n * c.r ** 4);
    const v = compareVariants(ratio, 'control', 'ratio', 'bayesian').variant_results[0] as Compared;
    expect(v.chance_to_win).toBeCloseTo(normalCdf(theta / Math.sqrt(variance)), 9);
    expect(v.credible_interval[0]).toBeCloseTo(theta - normalQuantile(0.975) * Math.sqrt(variance), 9);
    expect(v.significant).toBe(true);
  });
  it('no statistics when the baseline’s denominator is zero', () => {
    const zero = [{ ...ratio[0] }, { ...ratio[1], denominator_sum: 0, denominator_sum_squares: 0 }];
    const v = compareVariants(zero, 'control', 'ratio', 'frequentist').variant_results[0] as Compared;
    expect(v.p_value).toBeNull();
  });
});
