// The worker's job registry: each queue's jobs (by job name), with what to do when a job has failed
// for the last time, and the schedulers upserted at start-up and whenever Redis comes back.
// Add a job in worker/jobs/<job>.ts and list it here.
import type { Job } from 'bullmq';
import type { Config } from '../../shared/config.ts';
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

export interface Schedule {
  queue: string;
  schedulerId: string;
  pattern: string;
  jobName: string;
  data?: Record<string, unknown>;
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

/** Cron patterns are UTC and configurable; defaults: weekly batch Sunday 05:00, off-peak 03:00 nightly. */
export const schedules = (config: Pick<Config, 'deletion' | 'schedules'>): Schedule[] => [
  {
    queue: QUEUE_NAMES.deletions,
    schedulerId: 'deletion-weekly-batch',
    pattern: config.deletion.weeklyCron,
    jobName: 'release-batch',
    data: { mode: 'weekly' },
  },
  {
    queue: QUEUE_NAMES.deletions,
    schedulerId: 'deletion-off-peak',
    pattern: config.deletion.offPeakCron,
    jobName: 'release-batch',
    data: { mode: 'off_peak' },
  },
  {
    queue: QUEUE_NAMES.experimentResults,
    schedulerId: 'experiment-results-daily',
    pattern: config.schedules.experimentResultsCron,
    jobName: 'compute',
  },
  {
    queue: QUEUE_NAMES.maintenance,
    schedulerId: 'statistics-refresh',
    pattern: config.schedules.statisticsRefreshCron,
    jobName: 'refresh-statistics',
  },
  {
    queue: QUEUE_NAMES.maintenance,
    schedulerId: 'event-partitions',
    pattern: config.schedules.eventPartitionsCron,
    jobName: 'ensure-event-partitions',
  },
];
