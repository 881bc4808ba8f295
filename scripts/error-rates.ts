// `npm run -s error-rates`: every statistical method's false-positive rate and interval coverage on
// seeded A/A and A/B experiments (shared/experiments/error-rates.ts), printed as the markdown table
// README publishes: the same figures test/shared/experiments/error-rates.test.ts asserts and prints.
// Progress goes to stderr, the table to stdout. `--runs N` sets the experiments per phase of the
// read-once methods (default 10,000, as in the test); `--seed S` the seed. Exits 1 when a method's
// rates are outside its bounds.
import { parseArgs } from 'node:util';
import {
  ERROR_RATE_METHODS,
  ERROR_RATE_RUNS,
  ERROR_RATE_SEED,
  errorRates,
  errorRateTable,
  withinBounds,
} from '../shared/experiments/index.ts';

const { values } = parseArgs({ options: { runs: { type: 'string' }, seed: { type: 'string' } } });
const runs = Number(values.runs ?? ERROR_RATE_RUNS);
const seed = Number(values.seed ?? ERROR_RATE_SEED);
if (!Number.isInteger(runs) || runs < 1 || !Number.isInteger(seed)) {
  process.stderr.write('usage: npm run -s error-rates -- [--runs N] [--seed S] (whole numbers, N ≥ 1)\n');
  process.exit(2);
}
const started = performance.now();
const rows = errorRates(ERROR_RATE_METHODS, {
  runs,
  seed,
  progress: (message) => process.stderr.write(`${message} (${((performance.now() - started) / 1000).toFixed(1)} s)\n`),
});
process.stdout.write(`${errorRateTable(rows)}\n`);
const outside = rows.filter((row) => Object.values(withinBounds(row)).includes(false));
for (const row of outside) process.stderr.write(`outside its bounds: ${row.method}\n`);
process.exitCode = outside.length ? 1 : 0;
