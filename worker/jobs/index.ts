// The worker's job registry: each queue's processor, and the schedulers upserted at start-up.
// Add a processor in worker/jobs/<job>.ts and list it here.
import type { Job } from 'bullmq';
import type { WorkerDeps } from '../deps.ts';

export interface QueueProcessor {
  queue: string;
  process: (job: Job, deps: WorkerDeps) => Promise<unknown>;
  /** Jobs of this queue processed at once by one worker process. */
  concurrency?: number;
}

export interface Schedule {
  queue: string;
  schedulerId: string;
  pattern: string;
  jobName: string;
  data?: Record<string, unknown>;
}

export const processors: QueueProcessor[] = [];
export const schedules = (): Schedule[] => [];
