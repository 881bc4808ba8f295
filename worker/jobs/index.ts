// The worker's job registry: each queue's jobs (by job name), with what to do when a job has failed
// for the last time. Add a job in worker/jobs/<job>.ts and list it here; when it runs on a schedule,
// in shared/schedules.ts.
import type { Job } from 'bullmq';
import { QUEUE_NAMES } from '../../shared/queues.ts';
import type { WorkerDeps } from '../deps.ts';
import { deletePersonData, deletionJobFailed } from './delete-person-data.ts';
import { reconcileDeletions, releaseDeletionBatch } from './deletion-schedules.ts';
import { computeExperimentResults } from './experiment-results.ts';
import { ensureEventPartitions } from './event-partitions.ts';
import { refreshStatistics } from './refresh-statistics.ts';

export interface JobDefinition {
  run: (job: Job<any>, deps: WorkerDeps) => Promise<unknown>;
  /** Called once the job has failed for the last time (its attempts spent, or unrecoverable). */
  onFinalFailure?: (job: Job<any>, error: Error, deps: WorkerDeps) => Promise<void>;
}

export interface QueueProcessor {
  queue: string;
  jobs: Record<string, JobDefinition>;
}

export const processors: QueueProcessor[] = [
  {
    queue: QUEUE_NAMES.deletions,
    jobs: {
      delete: { run: deletePersonData, onFinalFailure: deletionJobFailed },
      'release-batch': { run: releaseDeletionBatch },
      // Run by each worker's timer (worker/runtime.ts); as a job, on demand.
      reconcile: { run: reconcileDeletions },
    },
  },
  { queue: QUEUE_NAMES.experimentResults, jobs: { compute: { run: computeExperimentResults } } },
  {
    queue: QUEUE_NAMES.maintenance,
    jobs: { 'refresh-statistics': { run: refreshStatistics }, 'ensure-event-partitions': { run: ensureEventPartitions } },
  },
];
