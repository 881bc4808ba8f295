// The worker's job registry: each queue's job handlers (by job name) and the schedulers
// upserted at start-up. Add a job in worker/jobs/<job>.ts and list it here.
import type { Job } from 'bullmq';
import { QUEUE_NAMES } from '../../shared/queues.ts';
import type { WorkerDeps } from '../deps.ts';
import { deletePersonData } from './delete-person-data.ts';
import { reconcileDeletions, releaseDeletionBatch } from './deletion-schedules.ts';
import { computeExperimentResults } from './experiment-results.ts';
import { ensureEventPartitions } from './event-partitions.ts';
import { refreshStatistics } from './refresh-statistics.ts';

export type JobHandler = (job: Job<any>, deps: WorkerDeps) => Promise<unknown>;

export interface QueueProcessor {
  queue: string;
  handlers: Record<string, JobHandler>;
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
    handlers: { delete: deletePersonData, 'release-batch': releaseDeletionBatch, reconcile: reconcileDeletions },
  },
  { queue: QUEUE_NAMES.experimentResults, handlers: { compute: computeExperimentResults } },
  { queue: QUEUE_NAMES.maintenance, handlers: { 'refresh-statistics': refreshStatistics, 'ensure-event-partitions': ensureEventPartitions } },
];

/** Cron patterns are UTC and configurable; defaults: weekly batch Sunday 05:00, off-peak 03:00 nightly. */
export const schedules = (env: NodeJS.ProcessEnv = process.env): Schedule[] => [
  {
    queue: QUEUE_NAMES.deletions,
    schedulerId: 'deletion-weekly-batch',
    pattern: env.DELETION_WEEKLY_CRON || '0 5 * * 0',
    jobName: 'release-batch',
    data: { mode: 'weekly' },
  },
  {
    queue: QUEUE_NAMES.deletions,
    schedulerId: 'deletion-off-peak',
    pattern: env.DELETION_OFF_PEAK_CRON || '0 3 * * *',
    jobName: 'release-batch',
    data: { mode: 'off_peak' },
  },
  { queue: QUEUE_NAMES.deletions, schedulerId: 'deletion-reconciler', pattern: env.DELETION_RECONCILE_CRON || '* * * * *', jobName: 'reconcile' },
  { queue: QUEUE_NAMES.experimentResults, schedulerId: 'experiment-results-daily', pattern: env.EXPERIMENT_RESULTS_CRON || '0 2 * * *', jobName: 'compute' },
  { queue: QUEUE_NAMES.maintenance, schedulerId: 'statistics-refresh', pattern: env.STATISTICS_REFRESH_CRON || '*/5 * * * *', jobName: 'refresh-statistics' },
  { queue: QUEUE_NAMES.maintenance, schedulerId: 'event-partitions', pattern: env.EVENT_PARTITIONS_CRON || '0 1 * * *', jobName: 'ensure-event-partitions' },
];
