// Starting and stopping the worker's BullMQ workers; main.ts runs it as a process, tests in-process.
import { UnrecoverableError, Worker, type Job } from 'bullmq';
import { QUEUE_NAMES, queuePrefix } from '../shared/queues.ts';
import { withTimeout } from '../shared/timeout.ts';
import type { WorkerDeps } from './deps.ts';
import { markDeletionFailed } from './jobs/delete-person-data.ts';
import { reconcileDeletions } from './jobs/deletion-schedules.ts';
import { processors, schedules, type Schedule } from './jobs/index.ts';

/** Upserting is idempotent by scheduler id: however many workers start, one scheduler per id results. */
export async function upsertSchedules(deps: WorkerDeps, list: Schedule[] = schedules()): Promise<void> {
  const byName = new Map<string, WorkerDeps['queues'][keyof WorkerDeps['queues']]>(
    Object.entries(QUEUE_NAMES).map(([key, name]) => [name, deps.queues[key as keyof typeof QUEUE_NAMES]]),
  );
  for (const schedule of list) {
    await byName.get(schedule.queue)!.upsertJobScheduler(schedule.schedulerId, { pattern: schedule.pattern, tz: 'UTC' }, { name: schedule.jobName, data: schedule.data ?? {} });
  }
}

export interface RunningWorker {
  workers: Worker[];
  close: (timeoutMs?: number) => Promise<void>;
}

export async function startWorkers(deps: WorkerDeps, options: { concurrency?: number; onJobDuration?: (queue: string, name: string, ms: number, ok: boolean) => void } = {}): Promise<RunningWorker> {
  const prefix = queuePrefix(deps.config);
  const workers = processors.map((entry) => {
    const worker = new Worker(
      entry.queue,
      async (job: Job) => {
        const handler = entry.handlers[job.name];
        if (!handler) throw new UnrecoverableError(`no handler for job "${job.name}" on queue ${entry.queue}`);
        const started = Date.now();
        deps.logger.info({ queue: entry.queue, job: job.name, jobId: job.id, attempt: job.attemptsMade + 1, data: job.data }, 'job started');
        try {
          const result = await handler(job, deps);
          options.onJobDuration?.(entry.queue, job.name, Date.now() - started, true);
          deps.logger.info({ queue: entry.queue, job: job.name, jobId: job.id, ms: Date.now() - started }, 'job finished');
          return result;
        } catch (error) {
          options.onJobDuration?.(entry.queue, job.name, Date.now() - started, false);
          throw error;
        }
      },
      {
        connection: deps.connection,
        prefix,
        concurrency: options.concurrency ?? deps.config.worker.concurrency,
        lockDuration: deps.config.worker.lockDurationMs,
        stalledInterval: deps.config.worker.lockDurationMs,
      },
    );
    worker.on('failed', (job, error) => {
      const final = !job || error instanceof UnrecoverableError || job.attemptsMade >= (job.opts.attempts ?? 1);
      deps.logger.error({ queue: entry.queue, job: job?.name, jobId: job?.id, err: error.message, final }, 'job failed');
      if (final && job?.name === 'delete' && typeof job.data?.deletionId === 'string') {
        void markDeletionFailed(deps, job.data.deletionId, error.message).catch(() => undefined);
      }
    });
    worker.on('error', (error) => deps.logger.error({ queue: entry.queue, err: error.message }, 'worker error'));
    return worker;
  });
  // Requests made while Redis was down are picked up at once, not only at the next reconciler tick.
  await reconcileDeletions(null, deps).catch((error) => deps.logger.warn({ err: (error as Error).message }, 'initial reconcile failed'));
  return {
    workers,
    close: async (timeoutMs = deps.config.worker.shutdownTimeoutMs) => {
      // Finish active jobs within the limit; past it, force: the jobs stall and another worker takes them.
      const timedOut = await withTimeout(Promise.allSettled(workers.map((w) => w.close())), timeoutMs, 'shutdown').then(
        () => false,
        () => true,
      );
      if (timedOut) {
        deps.logger.warn({ timeoutMs }, 'shutdown time limit reached; returning active jobs to the queue');
        // close(true) still waits for the running processor; give it a moment, then let the process
        // exit: the job's lock and lease lapse and another worker resumes it, as after a crash.
        await withTimeout(Promise.allSettled(workers.map((w) => w.close(true))), 500, 'forced shutdown').catch(() => undefined);
      }
      await Promise.allSettled(Object.values(deps.queues).map((q) => q.close()));
    },
  };
}
