// `npm run bench -- experiments-simulation`: the A/A and power simulations of
// test/shared/experiments/experiments-simulation.test.ts at full size (SIM_EXPERIMENTS, default 20,000 each),
// through the real engine. Prints each rate with its binomial standard error; README publishes them.
import {
  AA_FAMILY,
  aaFamilyWiseRates,
  anySignificant,
  formatRate,
  PEEKING_DAYS,
  peekingRates,
  peekingSpec,
  rateOf,
  seededRng,
  simulateExperiment,
} from '../shared/experiments/index.ts';
import { analyseMetrics } from '../shared/experiments/index.ts';

const experiments = Number(process.env.SIM_EXPERIMENTS ?? 20_000);
const started = performance.now();

const family = aaFamilyWiseRates(experiments, 1);
console.log(
  `A/A, fixed horizon, ${AA_FAMILY.metrics.length} metrics (2 mean, 2 funnel) × 1 treatment, α = 0.05, family-wise false-positive rate:`,
);
for (const [method, rate] of Object.entries(family)) console.log(`  ${method.padEnd(24)} ${formatRate(rate)}`);

console.log(`A/A read daily for ${PEEKING_DAYS} days (500 users/arm/day), stop at the first significant look:`);
for (const tuning of [5000, 1000, 50_000]) {
  const peeking = peekingRates(experiments, 2, tuning);
  if (tuning === 5000) {
    console.log(`  fixed-horizon, read once at the end  ${formatRate(peeking.fixedOnce)}`);
    console.log(`  fixed-horizon, daily peeking         ${formatRate(peeking.fixedPeeking)}`);
  }
  console.log(`  sequential (N* = ${tuning}), daily peeking ${formatRate(peeking.sequentialPeeking)}`);
}

// Power: a treatment lifting the metric by 5% (funnel 20% → 21%) or 3% (mean), read daily.
const rng = seededRng(3);
const powerRuns = Math.min(experiments, 5000);
let fixedAtEnd = 0;
let sequentialAny = 0;
let dayTotal = 0;
for (let e = 0; e < powerRuns; e++) {
  const spec = peekingSpec(e);
  spec.variants[1].lift = [e % 2 ? 0.05 : 0.03];
  const days = simulateExperiment(rng, spec);
  if (anySignificant(analyseMetrics(days[days.length - 1], { method: 'frequentist', baselineKey: 'control' }))) {
    fixedAtEnd++;
  }
  const seq = { method: 'frequentist' as const, baselineKey: 'control', sequential: { tuning_parameter: 5000 } };
  const first = days.findIndex((day) => anySignificant(analyseMetrics(day, seq)));
  if (first >= 0) {
    sequentialAny++;
    dayTotal += first + 1;
  }
}
console.log(`Power, lift 3% (mean) / 5% (funnel), ${PEEKING_DAYS} days, ${powerRuns} experiments:`);
console.log(`  fixed-horizon at day ${PEEKING_DAYS}              ${formatRate(rateOf(fixedAtEnd, powerRuns))}`);
console.log(
  `  sequential, any day (N* = 5000)      ${formatRate(rateOf(sequentialAny, powerRuns))}, mean stopping day ${(dayTotal / Math.max(1, sequentialAny)).toFixed(1)}`,
);
console.log(`(${((performance.now() - started) / 1000).toFixed(1)} s)`);
