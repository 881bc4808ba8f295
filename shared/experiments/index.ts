// The public face of shared/experiments/: the only file other folders import.
export {
  ERROR_RATE_METHODS,
  ERROR_RATE_RUNS,
  ERROR_RATE_SEED,
  errorRates,
  errorRateTable,
  withinBounds,
  type ErrorRateMethod,
  type ErrorRateRow,
} from './error-rates.ts';
export { banditReallocation, banditSummary } from './bandit-job.ts';
export { guardrailCheck } from './guardrail-job.ts';
export {
  GUARDRAIL_HARM,
  GUARDRAIL_METRICS,
  GUARDRAIL_SIM_DAYS,
  GUARDRAIL_SIM_LOOKS_PER_DAY,
  breakerSamplePerArm,
  fixedHorizonSamplePerArm,
  formatStopFraction,
  guardrailScenario,
  guardrailStopRates,
  type GuardrailRuns,
} from './guardrail-simulation.ts';
export { GUARDRAIL_DIRECTIONS } from './guardrails.ts';
export {
  deleteSavedMetric,
  findHoldout,
  findSavedMetric,
  insertSavedMetric,
  listHoldouts,
  listSavedMetrics,
  updateSavedMetric,
  type HoldoutRow,
  type SavedMetricRow,
} from './holdout-and-metric-store.ts';
export { computeExperimentResults } from './results-job.ts';
export { computeExperimentCounts, experimentForResults } from './results.ts';
export {
  ExperimentInputError,
  changeHoldout,
  createExperiment,
  createHoldout,
  duplicateExperiment,
  exposureCohortFor,
  holdoutFields,
  metricTimeseries,
  removeHoldout,
  resetGuardrails,
  savedMetricFields,
  updateExperiment,
} from './service.ts';
export {
  AA_FAMILY,
  PEEKING_DAYS,
  aaFamilyWiseRates,
  anySignificant,
  formatRate,
  peekingRates,
  peekingSpec,
  rateOf,
  seededRng,
  simulateExperiment,
} from './simulation.ts';
export { CORRECTION_METHODS, analyseMetrics } from './stats.ts';
export {
  findExperiment,
  isExperimentOrder,
  listExperiments,
  type ExperimentFilter,
  type ExperimentRow,
} from './store.ts';
