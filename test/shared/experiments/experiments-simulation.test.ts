import { describe, expect, it } from 'vitest';
import {
  aaFamilyWiseRates,
  binomial,
  chiSquare,
  formatRate,
  normal,
  PEEKING_DAYS,
  peekingRates,
  seededRng,
} from '../../../shared/experiments/simulation.ts';

// Seeded A/A simulations through the real engine (analyseMetrics of shared/experiments/stats.ts);
// bench/experiments-simulation.ts runs the same suites at 20,000 experiments for README's figures.
//
// How many experiments: with a true rate near 5%, the binomial standard error over n experiments is
// sqrt(0.05 · 0.95 / n): 0.22% at n = 10,000, so the band [4%, 6%] sits ≥ 3.8 standard errors from
// the rates the engine has (4.9–5.2% at 40,000 experiments: Holm and the Bonferroni split
// 1 − Π(1 − αᵢ) ≈ 4.9% over 4 independent comparisons, Benjamini-Hochberg exactly α under the global
// null, where its false discovery rate is the family-wise rate) — a correct engine fails it with
// probability < 1e-4, a wrong one (no correction: 1 − 0.95⁴ ≈ 18.5%) cannot pass.

const ALPHA_BAND = [0.04, 0.06];

describe('simulation harness: its samplers', () => {
  it('normal, chi-square and binomial draws have the right mean and variance', () => {
    const rng = seededRng(1);
    const moments = (draw: () => number, n = 40_000) => {
      let s = 0;
      let ss = 0;
      for (let i = 0; i < n; i++) {
        const x = draw();
        s += x;
        ss += x * x;
      }
      return { mean: s / n, variance: ss / n - (s / n) ** 2 };
    };
    const z = moments(() => normal(rng));
    expect(Math.abs(z.mean)).toBeLessThan(0.02);
    expect(Math.abs(z.variance - 1)).toBeLessThan(0.03);
    const c = moments(() => chiSquare(rng, 7));
    expect(Math.abs(c.mean - 7)).toBeLessThan(0.1);
    expect(Math.abs(c.variance - 14)).toBeLessThan(0.6);
    const b = moments(() => binomial(rng, 200, 0.1));
    expect(Math.abs(b.mean - 20)).toBeLessThan(0.1);
    expect(Math.abs(b.variance - 18)).toBeLessThan(0.8);
    const hi = moments(() => binomial(rng, 50, 0.8));
    expect(Math.abs(hi.mean - 40)).toBeLessThan(0.1);
    // The same seed gives the same sequence.
    const [a1, a2] = [seededRng(9), seededRng(9)];
    expect([a1(), a1(), a1()]).toEqual([a2(), a2(), a2()]);
  });
});

describe('A/A simulations: false-positive rates at α = 0.05', () => {
  it('10,000 A/A experiments × 4 metrics: the family-wise rate is 4–6% with each correction, far above without', {
    timeout: 120_000,
  }, () => {
    const rates = aaFamilyWiseRates(10_000, 20261125);
    console.info(Object.entries(rates).map(([method, r]) => `FWER ${method}: ${formatRate(r)}`));
    for (const method of ['holm', 'benjamini_hochberg', 'preferential_bonferroni'] as const) {
      expect(rates[method].rate, method).toBeGreaterThanOrEqual(ALPHA_BAND[0]);
      expect(rates[method].rate, method).toBeLessThanOrEqual(ALPHA_BAND[1]);
    }
    // Uncorrected, four chances at 5%: the suite sees the failure it guards against.
    expect(rates.none.rate).toBeGreaterThan(0.12);
  });

  it(`4,000 A/A experiments read daily for ${PEEKING_DAYS} days: ≤ 5% with sequential testing, far above with the fixed-horizon test`, {
    timeout: 120_000,
  }, () => {
    const rates = peekingRates(4_000, 4242);
    console.info(Object.entries(rates).map(([name, r]) => `${name}: ${formatRate(r)}`));
    expect(rates.sequentialPeeking.rate).toBeLessThanOrEqual(0.05);
    // Peeking at the fixed-horizon test: the harness detects the inflated rate.
    expect(rates.fixedPeeking.rate).toBeGreaterThan(0.15);
    // Read once at the end, the fixed-horizon test holds its level.
    expect(rates.fixedOnce.rate).toBeGreaterThanOrEqual(ALPHA_BAND[0] - 0.01);
    expect(rates.fixedOnce.rate).toBeLessThanOrEqual(ALPHA_BAND[1] + 0.01);
  });
});
