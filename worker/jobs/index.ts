// The worker's processors: one per job of shared/platform/jobs.ts, with what to do when a job has failed for
// the last time. Add a job there, write worker/jobs/<job>.ts and list it here; when it runs on a
// schedule, in shared/platform/schedules.ts.
import type { Job } from 'bullmq';
import type { JobData, JobKind } from '../../shared/platform/jobs.ts';
import type { WorkerDeps } from '../deps.ts';
import { deletePersonData, deletionJobFailed } from './delete-person-data.ts';
import { reconcileDeletions, releaseDeletionBatch } from './deletion-schedules.ts';
import { computeExperimentResults } from './experiment-results.ts';
import { ensureEventPartitions } from './event-partitions.ts';
import { guardrailCheck } from './guardrail-check.ts';
import { refreshStatistics } from './refresh-statistics.ts';
import { enforceRetention } from './retention.ts';
import { vacuumTable } from './vacuum-tables.ts';
import { deliverWebhookJob, reconcileWebhookDeliveries, webhookJobFailed } from './webhook-delivery.ts';
import { shipEventsJob } from './ship-events.ts';

export interface Processor<K extends JobKind> {
  run: (job: Job<JobData[K]>, deps: WorkerDeps) => Promise<unknown>;
  /** Called once the job has failed for the last time (its attempts spent, or unrecoverable). */
  onFinalFailure?: (job: Job<JobData[K]>, error: Error, deps: WorkerDeps) => Promise<void>;
}

export const processors: { [K in JobKind]: Processor<K> } = {
  deletion: { run: deletePersonData, onFinalFailure: deletionJobFailed },
  releaseDeletions: { run: releaseDeletionBatch },
  reconcileDeletions: { run: reconcileDeletions },
  experimentResults: { run: computeExperimentResults },
  guardrailCheck: { run: guardrailCheck },
  refreshStatistics: { run: refreshStatistics },
  ensureEventPartitions: { run: ensureEventPartitions },
  vacuumTable: { run: vacuumTable },
  retention: { run: enforceRetention },
  webhookDelivery: { run: deliverWebhookJob, onFinalFailure: webhookJobFailed },
  shipEvents: { run: shipEventsJob },
};

/**
 * What each worker's reconciler pass re-drives from PostgreSQL, in order (worker/runtime.ts): due
 * deletion requests (and windows a worker missed), then webhook deliveries, each without a live job.
 */
export const reconcilers: ((deps: WorkerDeps) => Promise<unknown>)[] = [
  (deps) => reconcileDeletions(null, deps),
  reconcileWebhookDeliveries,
];
