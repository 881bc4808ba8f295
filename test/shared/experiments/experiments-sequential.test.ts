import { describe, expect, it } from 'vitest';
import {
  alwaysValidPValue,
  confidenceSequenceHalfWidth,
  SEQUENTIAL_DEFAULT_TUNING,
  sequentialConfig,
  sequentialRho2,
} from '../../../shared/experiments/sequential.ts';
import { seededRng } from '../../../shared/experiments/simulation.ts';
import { analyseMetrics, compareVariants, type MetricStats } from '../../../shared/experiments/stats.ts';

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

// PostHog's sequential testing (PR #60879) is not in the PostHog source we can read, so there are no
// golden values of its tests to match: the values below are computed by hand from the closed form of
// Waudby-Smith et al.'s asymptotic confidence sequence, and checked against a second, independent
// computation (the Gaussian mixture martingale integrated numerically).

/**
 * Second implementation: the mixture martingale ∫ exp(λ·z·√N − λ²N/2) dN(0, ρ²)(λ) of N observations
 * whose standardized mean is z/√N, integrated by Simpson's rule around the integrand's peak (the
 * always-valid p-value is its inverse), and the confidence sequence found by bisection on it.
 */
function mixturePValue(theta: number, variance: number, n: number, rho2: number): number {
  const s = (theta / Math.sqrt(variance)) * Math.sqrt(n); // S/σ: the standardized sum
  const logF = (l: number) => l * s - (l * l * n) / 2 - (l * l) / (2 * rho2) - 0.5 * Math.log(2 * Math.PI * rho2);
  const peak = (s * rho2) / (n * rho2 + 1);
  const sd = Math.sqrt(rho2 / (n * rho2 + 1));
  const steps = 4000;
  const h = (24 * sd) / steps;
  const top = logF(peak);
  let sum = 0;
  for (let i = 0; i <= steps; i++) {
    const w = i === 0 || i === steps ? 1 : i % 2 ? 4 : 2;
    sum += w * Math.exp(logF(peak - 12 * sd + i * h) - top);
  }
  const logM = top + Math.log((sum * h) / 3);
  return Math.min(1, Math.exp(-logM));
}

function mixtureHalfWidth(variance: number, n: number, rho2: number, alpha: number): number {
  let lo = 0;
  let hi = 100 * Math.sqrt(variance);
  for (let i = 0; i < 100; i++) {
    const mid = (lo + hi) / 2;
    if (mixturePValue(mid, variance, n, rho2) > alpha) lo = mid;
    else hi = mid;
  }
  return (lo + hi) / 2;
}

// Control: 1000 users, 100 converted; test: 1000 users, 130 converted.
const funnel = [
  { key: 'control', number_of_samples: 1000, sum: 100, sum_squares: 100 },
  { key: 'test', number_of_samples: 1000, sum: 130, sum_squares: 130 },
];
const tenfold = funnel.map((v) => ({ ...v, number_of_samples: v.number_of_samples * 10, sum: v.sum * 10 }));

describe('sequential testing: asymptotic confidence sequence (Waudby-Smith et al.)', () => {
  it('ρ² from the tuning parameter, the half-width and the always-valid p-value by hand', () => {
    // ρ² = (−2 ln 0.05 + ln(1 − 2 ln 0.05)) / 5000 = (5.991465 + 1.944691) / 5000
    expect(sequentialRho2(0.05, 5000)).toBeCloseTo(0.0015872309, 9);
    const rho2 = 0.0015872309203475;
    // θ = 0.3, V = 0.02652 (compareVariants' delta method), N = 2000: Nρ² = 3.1744618
    // half = sqrt(V · 2 · 4.1744618 / 3.1744618 · ln(sqrt(4.1744618) / 0.05)) = 0.5087063
    expect(confidenceSequenceHalfWidth(0.02652, 2000, rho2, 0.05)).toBeCloseTo(0.50870625, 7);
    // p = sqrt(4.1744618) · exp(−3.1744618 · 0.09 / (2 · 0.02652 · 4.1744618)) = 0.5622209
    expect(alwaysValidPValue(0.3, 0.02652, 2000, rho2)).toBeCloseTo(0.56222087, 7);
    // Ten times the data: V = 0.002652, N = 20000 → half 0.1610388, p 4.1056e-7.
    expect(confidenceSequenceHalfWidth(0.002652, 20000, rho2, 0.05)).toBeCloseTo(0.16103879, 7);
    expect(alwaysValidPValue(0.3, 0.002652, 20000, rho2)).toBeCloseTo(4.1055559e-7, 12);
    expect(alwaysValidPValue(0, 0.002652, 20000, rho2)).toBe(1);
  });

  it('agrees with the mixture martingale integrated numerically (a second implementation)', () => {
    const rng = seededRng(42);
    for (let i = 0; i < 40; i++) {
      const n = Math.round(100 + rng() * 200_000);
      const variance = (0.001 + rng()) / n;
      const theta = (rng() - 0.5) * 8 * Math.sqrt(variance);
      const alpha = [0.01, 0.05, 0.1, 0.0125][i % 4];
      const rho2 = sequentialRho2(0.05, [500, 5000, 50_000][i % 3]);
      const p = alwaysValidPValue(theta, variance, n, rho2);
      const q = mixturePValue(theta, variance, n, rho2);
      expect(Math.abs(p - q), `${theta} ${variance} ${n}`).toBeLessThan(1e-9 * Math.max(1, q));
      const w = confidenceSequenceHalfWidth(variance, n, rho2, alpha);
      expect(w / mixtureHalfWidth(variance, n, rho2, alpha)).toBeCloseTo(1, 8);
    }
  });

  it('compareVariants shows the always-valid p-value and the confidence sequence, wider than the fixed-horizon interval', () => {
    const fixed = compareVariants(funnel, 'control', 'funnel', 'frequentist').variant_results[0] as Compared;
    const sequential = { tuning_parameter: 5000 };
    const v = compareVariants(funnel, 'control', 'funnel', 'frequentist', { sequential })
      .variant_results[0] as Compared;
    expect(v.p_value).toBeCloseTo(0.56222087, 6);
    expect(v.confidence_interval[0]).toBeCloseTo(0.3 - 0.50870625, 6);
    expect(v.confidence_interval[1]).toBeCloseTo(0.3 + 0.50870625, 6);
    expect(v.significant).toBe(false);
    expect(v.p_value).toBeGreaterThan(fixed.p_value);
    expect(v.confidence_interval[1] - v.confidence_interval[0]).toBeGreaterThan(
      fixed.confidence_interval[1] - fixed.confidence_interval[0],
    );
    const big = compareVariants(tenfold, 'control', 'funnel', 'frequentist', { sequential })
      .variant_results[0] as Compared;
    expect(big.p_value).toBeCloseTo(4.1055559e-7, 11);
    expect(big.confidence_interval[0]).toBeCloseTo(0.3 - 0.16103879, 6);
    expect(big.significant).toBe(true);
  });

  it('significant never disagrees with the interval or with p < alpha, with and without a correction', () => {
    const rng = seededRng(7);
    for (let i = 0; i < 200; i++) {
      const metrics: MetricStats[] = [0, 1, 2].map(() => ({
        kind: 'funnel',
        variants: ['control', 'a', 'b'].map((key) => {
          const n = 500 + Math.floor(rng() * 20_000);
          const sum = Math.floor(n * (0.1 + 0.02 * rng()));
          return { key, number_of_samples: n, sum, sum_squares: sum };
        }),
      }));
      for (const correction of [
        null,
        { method: 'holm' as const, scope: 'experiment' as const, primary_alpha_share: 0.5 },
        { method: 'benjamini_hochberg' as const, scope: 'metric' as const, primary_alpha_share: 0.5 },
        { method: 'preferential_bonferroni' as const, scope: 'experiment' as const, primary_alpha_share: 0.6 },
      ]) {
        const analysis = analyseMetrics(metrics, {
          method: 'frequentist',
          baselineKey: 'control',
          correction,
          sequential: { tuning_parameter: 5000 },
        });
        for (const m of analysis) {
          expect(m!.sequential_testing).toEqual({
            method: 'asymptotic_confidence_sequence',
            tuning_parameter: 5000,
            alpha: 0.05,
          });
          for (const v of m!.variant_results as Compared[]) {
            const [lo, hi] = v.confidence_interval;
            expect(v.significant).toBe(lo > 0 || hi < 0);
            // Away from the boundary itself (rounding), the p-value says the same.
            if (Math.abs(v.p_value - 0.05) > 1e-9) expect(v.significant).toBe(v.p_value < 0.05);
          }
        }
      }
    }
  });

  it('the Bayesian method ignores it; off unless enabled, with the default tuning parameter', () => {
    const b = analyseMetrics([{ kind: 'funnel', variants: funnel }], {
      method: 'bayesian',
      baselineKey: 'control',
      sequential: { tuning_parameter: 5000 },
    });
    expect(b[0]!.sequential_testing).toBeNull();
    expect(b[0]!.variant_results[0].chance_to_win).toBeTypeOf('number');
    expect(sequentialConfig({ method: 'frequentist' })).toBeNull();
    expect(sequentialConfig({ sequential: { enabled: false } })).toBeNull();
    expect(sequentialConfig({ sequential: { enabled: true } })).toEqual({
      tuning_parameter: SEQUENTIAL_DEFAULT_TUNING,
    });
    expect(sequentialConfig({ sequential: { enabled: true, tuning_parameter: 20_000 } })).toEqual({
      tuning_parameter: 20_000,
    });
  });
});
