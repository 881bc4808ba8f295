// `npm run -s error-rates`: every statistical method's false-positive rate and interval coverage on
// seeded A/A and A/B experiments (shared/experiments/error-rates.ts), printed as the markdown table
// README publishes: the same figures test/shared/experiments/error-rates.test.ts asserts and prints.
// Progress goes to stderr, the table to stdout. ERROR_RATE_RUNS sets the experiments per phase of the
// read-once methods (default 10,000, as in the test); ERROR_RATE_SEED the seed. Exits 1 when a
// method's rates are outside its bounds.
import {
  ERROR_RATE_METHODS,
  ERROR_RATE_RUNS,
  ERROR_RATE_SEED,
  errorRates,
  errorRateTable,
  withinBounds,
} from '../shared/experiments/index.ts';

const runs = Number(process.env.ERROR_RATE_RUNS ?? ERROR_RATE_RUNS);
const seed = Number(process.env.ERROR_RATE_SEED ?? ERROR_RATE_SEED);
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
