// The worker's processors: one per job of shared/platform/jobs.ts, bound to the job bodies the features
// export (and the platform's upkeep), with what to do when a job has failed for the last time. Add a job
// there, write its body in its feature (exported by its index.ts) and bind it here; when it runs on a
// schedule, in shared/platform/schedules.ts. No SQL here.
import type { Job } from 'bullmq';
import type { JobData, JobKind } from '../../shared/platform/jobs.ts';
import type { WorkerDeps } from '../deps.ts';
import {
  accessExportFailed,
  buildAccessExport,
  expireAccessExports,
  reconcileAccessExports,
} from '../../shared/access-exports/index.ts';
import {
  deletePersonData,
  deletionJobFailed,
  reconcileDeletions,
  releaseDeletionBatch,
} from '../../shared/deletions/index.ts';
import { purgeAccessLogJob } from '../../shared/access-log/index.ts';
import { ensureEventPartitionsJob, shipEventsJob } from '../../shared/events/index.ts';
import { banditReallocation, computeExperimentResults, guardrailCheck } from '../../shared/experiments/index.ts';
import { purgeWarningsJob } from '../../shared/ingestion/index.ts';
import { reconcileScrubs, runScrub, scrubJobFailed } from '../../shared/scrubs/index.ts';
import { refreshStatistics } from '../../shared/platform/db/statistics-job.ts';
import { vacuumTable } from '../../shared/platform/db/vacuum-job.ts';
import { enforceRetention } from '../../shared/retention/index.ts';
import {
  purgeQuarantineJob,
  quarantineHeldStore,
  reconcileReplays,
  replayQuarantineJob,
} from '../../shared/tracking-plan/index.ts';
import {
  deliverWebhookJob,
  purgeDeliveriesJob,
  reconcileWebhookDeliveries,
  webhookJobFailed,
} from '../../shared/webhooks/index.ts';

export interface Processor<K extends JobKind> {
  run: (job: Job<JobData[K]>, deps: WorkerDeps) => Promise<unknown>;
  /** Called once the job has failed for the last time (its attempts spent, or unrecoverable). */
  onFinalFailure?: (job: Job<JobData[K]>, error: Error, deps: WorkerDeps) => Promise<void>;
}

export const processors: { [K in JobKind]: Processor<K> } = {
  // A person's event deletion also removes what a tracking plan holds of their distinct ids.
  deletion: {
    run: (job, deps) => deletePersonData(job, { ...deps, heldEventStores: [quarantineHeldStore] }),
    onFinalFailure: deletionJobFailed,
  },
  scrub: { run: runScrub, onFinalFailure: scrubJobFailed },
  releaseDeletions: { run: releaseDeletionBatch },
  reconcileDeletions: { run: reconcileDeletions },
  experimentResults: { run: computeExperimentResults },
  guardrailCheck: { run: guardrailCheck },
  banditReallocation: { run: banditReallocation },
  refreshStatistics: { run: refreshStatistics },
  // The daily upkeep: partitions ahead, then the purges of ingestion warnings and webhook deliveries (30 days),
  // the read-access log (ACCESS_LOG_RETENTION_DAYS) and quarantined events (QUARANTINE_RETENTION_DAYS).
  ensureEventPartitions: {
    run: async (job, deps) => ({
      ...(await ensureEventPartitionsJob(job, deps)),
      ...(await purgeWarningsJob(job, deps)),
      ...(await purgeDeliveriesJob(job, deps)),
      ...(await purgeAccessLogJob(job, deps)),
      ...(await purgeQuarantineJob(job, deps)),
    }),
  },
  vacuumTable: { run: vacuumTable },
  retention: { run: enforceRetention },
  webhookDelivery: { run: deliverWebhookJob, onFinalFailure: webhookJobFailed },
  shipEvents: { run: shipEventsJob },
  replayQuarantine: { run: replayQuarantineJob },
  accessExport: { run: buildAccessExport, onFinalFailure: accessExportFailed },
  expireAccessExports: { run: expireAccessExports },
};

/**
 * What each worker's reconciler pass re-drives from PostgreSQL, in order (worker/runtime.ts): due
 * deletion requests (and windows a worker missed), due scrubs, then webhook deliveries, then quarantine
 * replays, then pending access exports, each without a live job.
 */
export const reconcilers: ((deps: WorkerDeps) => Promise<unknown>)[] = [
  (deps) => reconcileDeletions(null, deps),
  reconcileScrubs,
  reconcileWebhookDeliveries,
  reconcileReplays,
  reconcileAccessExports,
];
