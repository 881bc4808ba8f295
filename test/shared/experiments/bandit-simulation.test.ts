// The bandit's published figures, regenerated: seeded simulations (pure functions, no services) of
// batched Thompson sampling through the worker's own functions (shared/experiments/bandit.ts), and
// the pure pieces on their own. The setting: control converts at 10%, the treatment at 10.5% (5%
// better, relative), 20 periods of 20,000 persons each (400,000 in all), a 5% floor per arm.
import { describe, expect, it } from 'vitest';
import {
  allocationOf,
  allocationPercentages,
  allocationProblem,
  thompsonProbabilities,
  weightedEstimates,
} from '../../../shared/experiments/bandit.ts';
import { BANDIT_SCENARIO, banditSimulation, evenSplitRegret } from '../../../shared/experiments/bandit-simulation.ts';
import { seededRng } from '../../../shared/experiments/simulation.ts';

const pct = (x: number) => `${(x * 100).toFixed(1)}%`;

describe('bandit simulation', () => {
  it('regret ≥ 30% below an even split when one arm is 5% better, and the weighted 95% interval covers the effect in [93%, 97%] of 1,000 runs', () => {
    const s = banditSimulation(BANDIT_SCENARIO, 1000, 1);
    console.log(
      `bandit (10% vs 10.5%, 20 × 20,000 persons, floor 5%, 1,000 runs): regret ${s.regret.toFixed(0)} vs even ${s.evenRegret.toFixed(0)} ` +
        `(${pct(1 - s.regretRatio)} below); 95% interval coverage ${pct(s.coverage)}; ` +
        `bias weighted ${s.bias.toExponential(1)}, pooled ${s.unweightedBias.toExponential(1)} (effect 5e-3)`,
    );
    expect(s.runs).toBe(1000);
    expect(s.evenRegret).toBeCloseTo(400_000 * 0.5 * 0.005, 6);
    expect(s.regretRatio).toBeLessThanOrEqual(0.7);
    expect(s.coverage).toBeGreaterThanOrEqual(0.93);
    expect(s.coverage).toBeLessThanOrEqual(0.97);
  }, 60_000);

  it('is not biased toward the winner when rates drift over time, as the pooled difference is', () => {
    // Every arm's rate rises by 0.3 points a period; the effect stays 0.5 points. The bandit serves
    // the treatment more in later (higher) periods, so pooling all persons inflates its lead.
    const s = banditSimulation({ ...BANDIT_SCENARIO, drift: 0.003 }, 300, 7);
    console.log(
      `drifting rates (300 runs): coverage ${pct(s.coverage)}; bias weighted ${s.bias.toExponential(1)}, pooled ${s.unweightedBias.toExponential(1)}`,
    );
    expect(Math.abs(s.bias)).toBeLessThan(0.0005);
    expect(s.unweightedBias).toBeGreaterThan(0.005);
    expect(s.coverage).toBeGreaterThan(0.9);
  }, 60_000);
});

describe('bandit functions', () => {
  it('the even split regret is persons × gap / 2', () => {
    expect(evenSplitRegret({ ...BANDIT_SCENARIO, periods: 2, personsPerPeriod: 1000 })).toBeCloseTo(2000 * 0.0025, 9);
  });

  it('percentages: whole numbers summing to 100, each at least the floor', () => {
    expect(allocationPercentages([0.5, 0.5], 0.05)).toEqual([50, 50]);
    expect(allocationPercentages([0, 1], 0.05)).toEqual([5, 95]);
    expect(allocationPercentages([0.2, 0.3, 0.5], 0.1)).toEqual([24, 31, 45]);
    for (const probs of [
      [0.001, 0.999, 0],
      [1 / 3, 1 / 3, 1 / 3],
      [0.9, 0.05, 0.03, 0.02],
    ]) {
      const out = allocationPercentages(probs, 0.05);
      expect(out.reduce((a, b) => a + b, 0)).toBe(100);
      expect(Math.min(...out)).toBeGreaterThanOrEqual(5);
      expect(out.every(Number.isInteger)).toBe(true);
    }
  });

  it('Thompson probabilities: a clearly better arm wins nearly always; equal arms split; seeded', () => {
    const v = (key: string, n: number, s: number) => ({ key, number_of_samples: n, sum: s, sum_squares: s });
    const clear = thompsonProbabilities('funnel', [v('control', 1000, 100), v('test', 1000, 200)], seededRng(1))!;
    expect(clear[1]).toBeGreaterThan(0.999);
    const even = thompsonProbabilities('funnel', [v('control', 1000, 100), v('test', 1000, 100)], seededRng(1))!;
    expect(Math.abs(even[0] - 0.5)).toBeLessThan(0.02);
    expect(thompsonProbabilities('funnel', [v('control', 1000, 100), v('test', 1000, 100)], seededRng(1))).toEqual(
      even,
    );
    // Lower is better (goal: decrease); a mean metric's Normal approximation.
    const lower = thompsonProbabilities('funnel', [v('control', 1000, 100), v('test', 1000, 200)], seededRng(1), {
      lowerIsBetter: true,
    })!;
    expect(lower[0]).toBeGreaterThan(0.999);
    const mean = (key: string, n: number, m: number) => ({
      key,
      number_of_samples: n,
      sum: n * m,
      sum_squares: n * (m * m + 1),
    });
    expect(
      thompsonProbabilities('mean', [mean('control', 500, 1), mean('test', 500, 1.5)], seededRng(2))![1],
    ).toBeGreaterThan(0.999);
    expect(thompsonProbabilities('mean', [mean('control', 1, 1), mean('test', 500, 1.5)], seededRng(2))).toBeNull();
  });

  it('the weighted estimate: periods standardised by their own standard error (batched OLS), small periods merged', () => {
    const v = (key: string, n: number, s: number) => ({ key, number_of_samples: n, sum: s, sum_squares: s });
    // One period: the plain difference and its normal interval.
    const [one] = weightedEstimates(
      'funnel',
      [[v('control', 1000, 100), v('test', 1000, 150)]],
      ['control', 'test'],
      'control',
    );
    expect(one.estimate).toBeCloseTo(0.05, 12);
    expect(one.periods).toBe(1);
    // The per-person variance of each arm from all its periods (control 0.1·0.9, test 0.15·0.85).
    const se = Math.sqrt((0.1 * 0.9) / 1000 + (0.15 * 0.85) / 1000);
    expect(one.interval![1] - one.estimate!).toBeCloseTo(1.959964 * se, 6);
    expect(one.unweighted_estimate).toBeCloseTo(0.05, 12);
    // A period of 10 persons an arm is merged into the next.
    const [merged] = weightedEstimates(
      'funnel',
      [
        [v('control', 10, 1), v('test', 10, 2)],
        [v('control', 500, 50), v('test', 500, 75)],
      ],
      ['control', 'test'],
      'control',
    );
    expect(merged.periods).toBe(1);
    expect(merged.estimate).toBeCloseTo(77 / 510 - 51 / 510, 12);
  });

  it('parameters.allocation: off unless asked, defaults, refused when malformed', () => {
    expect(allocationOf({})).toBeNull();
    expect(allocationOf({ allocation: { type: 'thompson_sampling' } })).toEqual({
      type: 'thompson_sampling',
      interval_hours: 24,
      floor: 0.05,
      min_exposures: 100,
    });
    expect(allocationProblem({ allocation: { type: 'thompson_sampling', interval_hours: 6 } }, 2)).toBeNull();
    expect(allocationProblem({ allocation: { type: 'epsilon' } }, 2)).toMatch(/type must be one of thompson_sampling/);
    expect(allocationProblem({ allocation: { type: 'thompson_sampling', interval_hours: 0 } }, 2)).toMatch(/1 to 720/);
    expect(allocationProblem({ allocation: { type: 'thompson_sampling', floor: 0.4 } }, 3)).toMatch(/floor/);
    expect(allocationProblem({ allocation: { type: 'thompson_sampling', speed: 1 } }, 2)).toMatch(/speed/);
    expect(allocationProblem({ allocation: 'yes' }, 2)).toMatch(/must be an object/);
  });
});
