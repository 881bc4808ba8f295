// `npm run bench -- guardrail-simulation`: the circuit breaker's false-stop rate and power at full
// size (SIM_EXPERIMENTS, default 10,000 for the false stops, 4,000 per power point), the guardrail
// checked every 5 minutes for 14 days (4,032 looks) with the real decision (evaluateGuardrail),
// alternating a conversion (20%, a decrease is bad) and a per-user mean (CV 0.6, an increase is bad).
// The fast version is test/shared/experiments/guardrail-simulation.test.ts. Prints each rate with its binomial
// standard error; README publishes them.
import {
  breakerSamplePerArm,
  fixedHorizonSamplePerArm,
  formatStopFraction,
  GUARDRAIL_HARM,
  GUARDRAIL_METRICS,
  GUARDRAIL_SIM_DAYS,
  GUARDRAIL_SIM_LOOKS_PER_DAY,
  type GuardrailRuns,
  guardrailScenario,
  guardrailStopRates,
} from '../shared/experiments/index.ts';
import { formatRate } from '../shared/experiments/index.ts';

const experiments = Number(process.env.SIM_EXPERIMENTS ?? 10_000);
const powerRuns = Math.max(1, Math.round(experiments * 0.4));
const started = performance.now();
const line = (label: string, r: GuardrailRuns, stop = false) =>
  console.log(
    `  ${label.padEnd(44)} ${formatRate(r.stops)}${stop ? `, stopped at ${formatStopFraction(r)} of the sample on average` : ''}`,
  );

const H = 0.01;
const PLANNED = 4;
// SIM_PART=breaker runs only the last section (the breaker's own planned sample).
const all = process.env.SIM_PART !== 'breaker';
console.log(
  `Checked every 5 minutes for ${GUARDRAIL_SIM_DAYS} days (${GUARDRAIL_SIM_DAYS * GUARDRAIL_SIM_LOOKS_PER_DAY} looks), tolerated_harm ${100 * H}%; n80 (fixed-horizon sample per arm for a 5% change, 80%, α = 0.05): ${GUARDRAIL_METRICS.map((m) => `${m.metric.kind} ${fixedHorizonSamplePerArm(m.metric, GUARDRAIL_HARM)}`).join(', ')}`,
);
if (all) {
  console.log(`False stops within a planned sample of ${PLANNED} × n80, ${experiments} experiments each:`);
  const both = ['always_valid', 'fixed_horizon'] as const;
  const aa = guardrailStopRates(experiments, 11, guardrailScenario(H, 0, PLANNED), both);
  line('no harm (A/A), always-valid (the breaker)', aa.always_valid);
  line('no harm (A/A), fixed-horizon interval', aa.fixed_horizon);
  const boundary = guardrailStopRates(experiments, 12, guardrailScenario(H, H, PLANNED), both);
  line('harm = tolerated 1%, always-valid (the breaker)', boundary.always_valid);
  line('harm = tolerated 1%, fixed-horizon interval', boundary.fixed_horizon);

  console.log(`Stopped within the planned sample, a 5% harm, ${powerRuns} experiments each:`);
  for (const multiple of [1, 2, 3, 3.5, 4, 5]) {
    line(
      `tolerated 1%, planned ${multiple} × n80`,
      guardrailStopRates(powerRuns, 20 + multiple, guardrailScenario(H, GUARDRAIL_HARM, multiple)).always_valid,
      true,
    );
  }
  for (const h of [0.005, 0.02]) {
    line(
      `tolerated ${100 * h}%, planned ${PLANNED} × n80`,
      guardrailStopRates(powerRuns, 30, guardrailScenario(h, GUARDRAIL_HARM, PLANNED)).always_valid,
      true,
    );
  }
  console.log(`Stopped within 1 × n80 (the fixed-horizon plan), tolerated 1%, ${powerRuns} experiments each:`);
  for (const harm of [0.075, 0.1, 0.15]) {
    line(`harm ${100 * harm}%`, guardrailStopRates(powerRuns, 40, guardrailScenario(H, harm, 1)).always_valid, true);
  }
}

// The breaker's own planned sample (guardrailPlannedSamplePerArm: 80% power at its last look for a
// 5% harm with 1% tolerated), which the guardrail knows (parameters.recommended_sample_size), so its
// interval is tuned to it (guardrailTau).
const plan = { plan: 'breaker' as const };
console.log(
  `The breaker's planned sample for a 5% harm, tolerated 1%: ${GUARDRAIL_METRICS.map((m) => `${m.metric.kind} ${breakerSamplePerArm(m.metric, GUARDRAIL_HARM, H)} (${(breakerSamplePerArm(m.metric, GUARDRAIL_HARM, H) / fixedHorizonSamplePerArm(m.metric, GUARDRAIL_HARM)).toFixed(2)} × n80)`).join(', ')}; interval tuned to it, ${experiments} experiments each:`,
);
line('no harm (A/A)', guardrailStopRates(experiments, 51, guardrailScenario(H, 0, 1, plan)).always_valid);
line('harm = tolerated 1%', guardrailStopRates(experiments, 52, guardrailScenario(H, H, 1, plan)).always_valid);
for (const multiple of [0.75, 1]) {
  line(
    `harm 5%, planned ${multiple} × the breaker's sample`,
    guardrailStopRates(experiments, 53, guardrailScenario(H, GUARDRAIL_HARM, multiple, plan)).always_valid,
    true,
  );
}
console.log(`(${((performance.now() - started) / 1000).toFixed(1)} s)`);
