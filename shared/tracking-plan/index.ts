// The public face of shared/tracking-plan/: the only file other folders import. A project's tracking plan
// (a JSON document, versioned), enforced at capture per event (allow, stamp, omit, quarantine, drop, and
// drop rules), its quarantine and the replay of what it holds, and the violation counters.
export {
  MAX_DROP_RULES,
  MAX_PLAN_EVENTS,
  PLAN_DOCUMENT_SCHEMA,
  PLAN_MODES,
  PlanInputError,
  compilePlan,
  enforcePlan,
  type CompiledPlan,
  type DropRule,
  type PlanDocument,
  type PlanMode,
  type Violation,
} from './plan.ts';
export {
  DIFF_DAYS,
  DIFF_SAMPLE,
  diffPlan,
  enforceAtCapture,
  loadPlan,
  purgeQuarantineJob,
  putPlan,
  quarantineHeldStore,
  violationsByEvent,
  type CaptureEnforcement,
  type EventViolations,
  type PlanDiff,
} from './service.ts';
export {
  REPLAY_BATCH,
  enqueueReplay,
  reconcileReplays,
  filterOf,
  replayAll,
  replayBatch,
  replayDryRun,
  replayQuarantineJob,
  type ReplayCounts,
} from './replay.ts';
export {
  countQuarantine,
  currentPlanVersion,
  findReplay,
  insertReplay,
  listPlanVersions,
  listQuarantine,
  type PlanVersionRow,
  type QuarantineFilter,
  type ReplayRow,
} from './store.ts';
