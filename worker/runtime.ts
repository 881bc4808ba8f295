// Starting and stopping the worker's BullMQ workers; main.ts runs it as a process, tests in-process.
// Nothing a deletion needs lives only in Redis: each worker reconciles on a timer of its own, and
// re-creates the schedulers whenever its Redis connection comes back (an empty Redis after a restart
// without persistence, or a failover) or a reconcile finds one missing.
import { MetricsTime, UnrecoverableError, Worker, type Job } from 'bullmq';
import { QUEUE_NAMES, queuePrefix, type Queues } from '../shared/platform/queues.ts';
import { JOBS, type JobKind } from '../shared/platform/jobs.ts';
import { withTimeout } from '../shared/platform/timeout.ts';
import type { WorkerDeps } from './deps.ts';
import { processors, reconcilers, type Processor } from './jobs/index.ts';
import { defaultSchedules, recordedSchedules, type Schedule } from '../shared/platform/schedules.ts';
import { repeatingErrorLog } from '../shared/platform/logger.ts';

/** The job kind of a queue's job name. */
const kindOf = (queue: keyof Queues, name: string) =>
  (Object.keys(JOBS) as JobKind[]).find((kind) => JOBS[kind].queue === queue && JOBS[kind].name === name);

/**
 * Makes Redis hold a scheduler for each recorded schedule, with its pattern: missing ones (Redis
 * lost them) and changed ones (`manage schedule set`) are upserted. Idempotent by scheduler id:
 * however many workers do it, one scheduler per id results. Returns how many it upserted.
 */
export async function syncSchedulers(deps: WorkerDeps, list: Schedule[]): Promise<number> {
  let upserted = 0;
  for (const s of list) {
    const queue = deps.queues[JOBS[s.job].queue];
    if ((await queue.getJobScheduler(s.schedulerId))?.pattern === s.pattern) continue;
    await queue.upsertJobScheduler(
      s.schedulerId,
      { pattern: s.pattern, tz: 'UTC' },
      { name: JOBS[s.job].name, data: s.data ?? {} },
    );
    upserted++;
  }
  return upserted;
}

export interface RunningWorker {
  workers: Worker[];
  /** The first reconcile pass has run (it waits for Redis: it never settles while Redis is away). */
  started: Promise<void>;
  /** Stops within `timeoutMs` (default WORKER_SHUTDOWN_TIMEOUT_MS) whatever Redis is doing, even before `started`. */
  close: (timeoutMs?: number) => Promise<void>;
}

/**
 * The workers take jobs at once; the handle comes back before the first reconcile pass (which needs
 * Redis), so a process can always be stopped.
 */
export function startWorkers(
  deps: WorkerDeps,
  options: {
    concurrency?: number;
    onJobDuration?: (queue: string, name: string, ms: number, ok: boolean) => void;
    /** Keep the schedulers in Redis (the worker process does; in-process test workers don't). */
    schedules?: boolean;
  } = {},
): RunningWorker {
  const prefix = queuePrefix(deps.config);
  // Connection errors repeat with every retry while Redis is away: once per 30 s for all queues.
  const logWorkerError = repeatingErrorLog((fields) => deps.logger.error(fields, 'worker error'));
  const workers = (Object.keys(QUEUE_NAMES) as (keyof Queues)[]).map((queueKey) => {
    const entry = { queue: QUEUE_NAMES[queueKey] };
    const processorOf = (name: string) => {
      const kind = kindOf(queueKey, name);
      return kind ? (processors[kind] as Processor<JobKind>) : undefined;
    };
    const worker = new Worker(
      entry.queue,
      async (job: Job) => {
        const definition = processorOf(job.name);
        if (!definition) throw new UnrecoverableError(`no handler for job "${job.name}" on queue ${entry.queue}`);
        const started = Date.now();
        deps.logger.info(
          { queue: entry.queue, job: job.name, jobId: job.id, attempt: job.attemptsMade + 1, data: job.data },
          'job started',
        );
        try {
          const result = await definition.run(job, deps);
          options.onJobDuration?.(entry.queue, job.name, Date.now() - started, true);
          deps.logger.info(
            { queue: entry.queue, job: job.name, jobId: job.id, ms: Date.now() - started },
            'job finished',
          );
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
        // BullMQ counts completed and finally failed jobs in Redis only when asked: the API's
        // bullmq_job_{completed,failed}_total read these counts (plus a week of per-minute points).
        metrics: { maxDataPoints: MetricsTime.ONE_WEEK },
      },
    );
    worker.on('failed', (job, error) => {
      const final = !job || error instanceof UnrecoverableError || job.attemptsMade >= (job.opts.attempts ?? 1);
      deps.logger.error(
        { queue: entry.queue, job: job?.name, jobId: job?.id, err: error.message, final },
        'job failed',
      );
      const onFinalFailure = job && final ? processorOf(job.name)?.onFinalFailure : undefined;
      if (onFinalFailure) {
        void onFinalFailure(job!, error, deps).catch((hookError) =>
          deps.logger.error(
            { queue: entry.queue, jobId: job!.id, err: (hookError as Error).message },
            'final-failure hook failed',
          ),
        );
      }
    });
    worker.on('error', (error) => logWorkerError({ queue: entry.queue, err: error.message }));
    return worker;
  });

  let first = true;
  const keepSchedules = async () => {
    const { schedules, disagreements } = await recordedSchedules(deps.orm.em.fork(), defaultSchedules(deps.config));
    if (first) {
      first = false;
      for (const d of disagreements) {
        deps.logger.warn(
          { setting: d.setting, here: d.mine, recorded: d.recorded },
          `${d.setting} here is "${d.mine}", but the recorded schedule is "${d.recorded}", which this worker follows; ` +
            `change it for every worker with: npm run manage -- schedule set --id ${d.schedulerId} --cron "…"`,
        );
      }
    }
    if (!options.schedules) return;
    const upserted = await syncSchedulers(deps, schedules);
    if (upserted) deps.logger.warn({ upserted }, 'schedulers missing in Redis or changed; upserted');
  };
  // One pass: schedulers as recorded, overdue windows released, every due request and every pending
  // webhook delivery with a live job.
  const reconcile = async () => {
    try {
      await keepSchedules();
      for (const reconcileFrom of reconcilers) await reconcileFrom(deps);
    } catch (error) {
      deps.logger.warn({ err: (error as Error).message }, 'reconcile failed; next pass in a moment');
    }
  };
  // An empty Redis after a reconnect has no schedulers: put them back at once.
  const onReady = () => void reconcile();
  deps.connection.on('ready', onReady);
  // Requests made while Redis was down are picked up at once, then on every tick.
  let timer: NodeJS.Timeout | undefined;
  let closing = false;
  const started = reconcile().then(() => {
    if (closing) return;
    timer = setInterval(() => void reconcile(), deps.config.deletion.reconcileSeconds * 1000);
    timer.unref();
  });

  return {
    workers,
    started,
    close: async (timeoutMs = deps.config.worker.shutdownTimeoutMs) => {
      closing = true;
      clearInterval(timer);
      deps.connection.off('ready', onReady);
      // Finish active jobs within the limit; past it, force: the jobs stall and another worker takes them.
      // (Without Redis, BullMQ's close waits for commands that never return: the limit ends that too.)
      const timedOut = await withTimeout(Promise.allSettled(workers.map((w) => w.close())), timeoutMs, 'shutdown').then(
        () => false,
        () => true,
      );
      if (timedOut) {
        deps.logger.warn({ timeoutMs }, 'shutdown time limit reached; returning active jobs to the queue');
        // close(true) still waits for the running processor; give it a moment, then let the process
        // exit: the job's lock and lease lapse and another worker resumes it, as after a crash.
        await withTimeout(Promise.allSettled(workers.map((w) => w.close(true))), 500, 'forced shutdown').catch(
          () => undefined,
        );
      }
      await withTimeout(Promise.allSettled(Object.values(deps.queues).map((q) => q.close())), 500, 'queues').catch(
        () => undefined,
      );
    },
  };
}
