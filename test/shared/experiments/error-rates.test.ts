import { afterAll, describe, expect, it } from 'vitest';
import {
  ERROR_RATE_METHODS,
  ERROR_RATE_RUNS,
  ERROR_RATE_SEED,
  type ErrorRateRow,
  errorRates,
  errorRateTable,
  ORDER_VALUE,
  withinBounds,
} from '../../../shared/experiments/error-rates.ts';
import { seededRng } from '../../../shared/experiments/simulation.ts';
import { compareVariants } from '../../../shared/experiments/stats.ts';

// Published error rates (issue #46 item 4): every method of the engine on seeded A/A and A/B
// experiments of per-person data (shared/experiments/error-rates.ts), its false-positive rate and its
// intervals' coverage of the true effect asserted within its bounds. The table printed at the end is
// the one README publishes (`npm run -s error-rates` prints the same).
//
// How many runs: 10,000 A/A and 10,000 A/B experiments per read-once method. At a true 5% the
// binomial standard error is 0.22 percentage points, so the band [4%, 6%] (and [94%, 96%]) is 4.6
// standard errors wide on each side: a correct method falls outside by chance with probability
// ~4e-6 per assertion; with the seed fixed the figures are the same on every run. Monitored
// (sequential) methods: 4,000 experiments each read at 50 looks; their bound is one-sided.

const rows: ErrorRateRow[] = [];
const models = [...new Set(ERROR_RATE_METHODS.map((m) => m.model))];

describe('error rates of every method (seeded A/A and A/B experiments through the engine)', () => {
  afterAll(() => {
    // In the table's order (the methods'), as `npm run -s error-rates` prints it.
    const order = ERROR_RATE_METHODS.map((m) => m.name);
    rows.sort((a, b) => order.indexOf(a.method) - order.indexOf(b.method));
    if (rows.length) console.info(`\n${errorRateTable(rows)}\n`);
  });

  for (const model of models) {
    const methods = ERROR_RATE_METHODS.filter((m) => m.model === model);
    it(`${model.name}: ${methods.map((m) => m.name).join('; ')}`, { timeout: 240_000 }, () => {
      const out = errorRates(methods, { runs: ERROR_RATE_RUNS, seed: ERROR_RATE_SEED });
      rows.push(...out);
      for (const row of out) {
        const inside = withinBounds(row);
        const figures = `${row.method}: false positives ${row.aa.falsePositives.rate}, winners ${row.aa.winners.rate}, coverage ${row.ab.coverage.rate}`;
        expect.soft(inside.falsePositives, figures).toBe(true);
        expect.soft(inside.winners, figures).toBe(true);
        expect.soft(inside.coverage, figures).toBe(true);
        // Every experiment got a result at its last look (1,000 persons per arm is plenty).
        expect.soft(row.aa.noResult + row.ab.noResult, row.method).toBe(0);
      }
    });
  }
});

describe('the suite itself', () => {
  it('is the same on every run (seeded) and a method added to a model changes no other row', () => {
    const [mean, cuped] = ERROR_RATE_METHODS.filter((m) => m.model === ORDER_VALUE);
    const alone = errorRates([mean], { runs: 300 });
    const together = errorRates([mean, cuped], { runs: 300 });
    expect(together[0]).toEqual(alone[0]);
    expect(errorRates([mean], { runs: 300 })).toEqual(alone);
    expect(errorRates([mean], { runs: 300, seed: 7 })).not.toEqual(alone);
  });

  it('the negative control fails: a fixed-horizon test read at every look is far above 5%', () => {
    // (Asserted inside its model's run above, where its bounds are where the failure lands; here the
    // bounds themselves are checked to be a failure of the read-once bands.)
    const control = ERROR_RATE_METHODS.filter((m) => m.negativeControl);
    expect(control.length).toBeGreaterThan(0);
    for (const m of control) {
      expect(m.bounds.falsePositives[0]).toBeGreaterThan(0.06);
      expect(m.bounds.coverage[1]).toBeLessThan(0.94);
    }
  });
});

describe('CUPED: the relative effect’s variance counts the control’s own variance', () => {
  // Found by the suite: with a strong covariate the CUPED-adjusted treatment mean ȳT − θc·x̄T is far
  // below ȳT, and the former delta-method term (adjT/ȳC)²·s²C,adj dropped most of the control's
  // variance: 13.5% (mean) and 14.7% (funnel) false positives at α = 0.05, 20.6% and 22.1%
  // `significant` (Bayesian), 84–87% coverage, 7.9% for sequential testing (the suite's models and
  // seed). This case: two identical arms of 2,000 persons whose metric is 0.9 × its pre-period value
  // + noise; the former formula's interval was 1.38 standard errors wide each side.
  it('an A/A comparison’s interval is as wide as the CUPED estimate’s standard error says', () => {
    const rng = seededRng(11);
    const arm = (key: string) => {
      const v = { key, number_of_samples: 2000, sum: 0, sum_squares: 0 };
      const x = { covariate_sum: 0, covariate_sum_squares: 0, covariate_sum_product: 0 };
      for (let i = 0; i < 2000; i++) {
        const pre = 10 + 3 * Math.sqrt(-2 * Math.log(rng())) * Math.cos(2 * Math.PI * rng());
        const y = 0.9 * pre + 1 + (rng() - 0.5) * 2;
        v.sum += y;
        v.sum_squares += y * y;
        x.covariate_sum += pre;
        x.covariate_sum_squares += pre * pre;
        x.covariate_sum_product += pre * y;
      }
      return { ...v, ...x };
    };
    const control = arm('control');
    const test = arm('test');
    const r = compareVariants([control, test], 'control', 'mean', 'frequentist').variant_results[0] as {
      confidence_interval: [number, number];
    };
    // The CUPED estimate's variance by hand: residuals e = y − θc·x have variance s²e per person in
    // each arm; Var((ēT − ēC)/ȳC) ≈ (s²e,T/nT + s²e,C/nC)/ȳC² at θ ≈ 0.
    const n = 2000;
    const pooled = (k: 'sum' | 'covariate_sum') => control[k] + test[k];
    const cov =
      (control.covariate_sum_product +
        test.covariate_sum_product -
        (pooled('sum') * pooled('covariate_sum')) / (2 * n)) /
      (2 * n - 1);
    const varX =
      (control.covariate_sum_squares + test.covariate_sum_squares - pooled('covariate_sum') ** 2 / (2 * n)) /
      (2 * n - 1);
    const thetaC = cov / varX;
    const residualVariance = (a: typeof control) => {
      const e = a.sum - thetaC * a.covariate_sum;
      const ee = a.sum_squares - 2 * thetaC * a.covariate_sum_product + thetaC ** 2 * a.covariate_sum_squares;
      return (ee - (e * e) / n) / (n - 1);
    };
    const u = control.sum / n;
    const se = Math.sqrt((residualVariance(control) / n + residualVariance(test) / n) / u ** 2);
    const halfWidth = (r.confidence_interval[1] - r.confidence_interval[0]) / 2;
    // 1.96 standard errors (the t quantile at ~4,000 df), within 2%.
    expect(halfWidth / se).toBeGreaterThan(1.96 * 0.98);
    expect(halfWidth / se).toBeLessThan(1.97 * 1.02);
  });
});
