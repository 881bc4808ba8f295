import { describe, expect, it } from 'vitest';
import {
  compareVariants,
  normalCdf,
  normalQuantile,
  studentTCdf,
  studentTQuantile,
} from '../../shared/experiments/stats.ts';

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
    const v = r.variant_results[0] as any;
    // θ = 0.13/0.10 − 1 = 0.3; V = 0.13·0.87/(1000·0.01) + 0.13²·0.09/(1000·0.0001) = 0.01131 + 0.01521 = 0.02652
    const sd = Math.sqrt(0.02652);
    expect(v.chance_to_win).toBeCloseTo(normalCdf(0.3 / sd), 6);
    expect(v.chance_to_win).toBeCloseTo(0.9671, 3);
    expect(v.credible_interval[0]).toBeCloseTo(0.3 - 1.959964 * sd, 4);
    expect(v.significant).toBe(true);
  });
  it('frequentist: Welch t-test on the relative effect', () => {
    const v = compareVariants(funnel, 'control', 'funnel', 'frequentist').variant_results[0] as any;
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
    ).variant_results[0] as any;
    expect(v.validation_failures).toEqual(['NOT_ENOUGH_EXPOSURES']);
    expect(v.chance_to_win).toBeNull();
  });
});
