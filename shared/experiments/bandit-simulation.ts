// Seeded simulations of the bandit (bandit.ts): batched Thompson sampling against an even split on a
// conversion metric, through the same functions the worker uses (thompsonProbabilities,
// allocationPercentages, weightedEstimates). Each period, the persons arriving are split by the
// current rollout percentages (exactly: round(share × persons), as hashing does on average), each
// converts with its arm's rate (exact binomial draws); the next period's allocation comes from all
// the counts so far. Regret: the expected conversions lost against always serving the best arm,
// Σ persons × (best rate − their arm's rate).
import { allocationPercentages, thompsonProbabilities, weightedEstimates } from './bandit.ts';
import type { VariantStats } from './moments.ts';
import { binomial, type Rng, seededRng } from './simulation.ts';

export interface BanditScenario {
  /** Conversion rate of each arm (the first is control). */
  rates: number[];
  periods: number;
  personsPerPeriod: number;
  floor: number;
  /** Posterior draws per reallocation (the worker uses THOMPSON_DRAWS). */
  draws: number;
  /** Added to every arm's rate in period p: p × drift (rates changing over time, the effect constant). */
  drift?: number;
}

/** Control converts at 10%, the treatment at 10.5% (5% better, relative); 20 periods of 20,000 persons. */
export const BANDIT_SCENARIO: BanditScenario = {
  rates: [0.1, 0.105],
  periods: 20,
  personsPerPeriod: 20_000,
  floor: 0.05,
  draws: 200,
};

export interface BanditRun {
  regret: number;
  /** The treatment's (arm 1's) period-weighted estimate and interval, and the pooled difference. */
  estimate: number | null;
  interval: [number, number] | null;
  unweighted: number | null;
  /** Arm 1's share in the last period. */
  finalShare: number;
}

/** One simulated experiment; `adaptive` false keeps the even split. */
export function simulateBandit(rng: Rng, scenario: BanditScenario, adaptive = true): BanditRun {
  const k = scenario.rates.length;
  const keys = scenario.rates.map((_, i) => (i === 0 ? 'control' : `test-${i}`));
  let percentages = allocationPercentages(new Array(k).fill(1 / k), 0);
  const periods: VariantStats[][] = [];
  const total = keys.map((key) => ({ key, number_of_samples: 0, sum: 0, sum_squares: 0 }));
  let regret = 0;
  for (let p = 0; p < scenario.periods; p++) {
    const rates = scenario.rates.map((r) => Math.min(Math.max(r + p * (scenario.drift ?? 0), 0), 1));
    const best = Math.max(...rates);
    const counts = percentages.map((pct) => Math.round((pct / 100) * scenario.personsPerPeriod));
    const period = keys.map((key, i) => {
      const s = binomial(rng, counts[i], rates[i]);
      regret += counts[i] * (best - rates[i]);
      return { key, number_of_samples: counts[i], sum: s, sum_squares: s };
    });
    periods.push(period);
    for (const [i, v] of period.entries()) {
      total[i].number_of_samples += v.number_of_samples;
      total[i].sum += v.sum;
      total[i].sum_squares += v.sum_squares;
    }
    if (adaptive) {
      const probabilities = thompsonProbabilities('funnel', total, rng, { draws: scenario.draws });
      if (probabilities) percentages = allocationPercentages(probabilities, scenario.floor);
    }
  }
  const [estimate] = weightedEstimates('funnel', periods, keys, 'control');
  return {
    regret,
    estimate: estimate.estimate,
    interval: estimate.interval,
    unweighted: estimate.unweighted_estimate,
    finalShare: percentages[1] / 100,
  };
}

export interface BanditSummary {
  runs: number;
  /** Mean regret of the bandit and of the even split, and bandit ÷ even. */
  regret: number;
  evenRegret: number;
  regretRatio: number;
  /** Share of runs whose 95% interval covers the true effect (arm 1 − control). */
  coverage: number;
  /** Mean of the weighted estimate and of the pooled difference, minus the true effect. */
  bias: number;
  unweightedBias: number;
}

/** The even split's regret (its expectation: the split does not depend on the data). */
export function evenSplitRegret(scenario: BanditScenario): number {
  const k = scenario.rates.length;
  const even = allocationPercentages(new Array(k).fill(1 / k), 0);
  let regret = 0;
  for (let p = 0; p < scenario.periods; p++) {
    const rates = scenario.rates.map((r) => Math.min(Math.max(r + p * (scenario.drift ?? 0), 0), 1));
    const best = Math.max(...rates);
    for (const [i, pct] of even.entries())
      regret += Math.round((pct / 100) * scenario.personsPerPeriod) * (best - rates[i]);
  }
  return regret;
}

/** `runs` seeded runs of the scenario under the bandit, against the even split's regret. */
export function banditSimulation(scenario: BanditScenario, runs: number, seed: number): BanditSummary {
  const rng = seededRng(seed);
  const effect = scenario.rates[1] - scenario.rates[0];
  let regret = 0;
  let covered = 0;
  let bias = 0;
  let unweightedBias = 0;
  for (let r = 0; r < runs; r++) {
    const run = simulateBandit(rng, scenario, true);
    regret += run.regret;
    if (run.interval && run.interval[0] <= effect && effect <= run.interval[1]) covered++;
    bias += (run.estimate ?? 0) - effect;
    unweightedBias += (run.unweighted ?? 0) - effect;
  }
  const evenRegret = evenSplitRegret(scenario);
  return {
    runs,
    regret: regret / runs,
    evenRegret,
    regretRatio: regret / runs / evenRegret,
    coverage: covered / runs,
    bias: bias / runs,
    unweightedBias: unweightedBias / runs,
  };
}
