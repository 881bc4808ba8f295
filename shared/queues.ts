// Queue names, job payloads and enqueue helpers both processes share.
// Jobs carry only ids: the source of truth for every request is its row in PostgreSQL, so a job
// lost while Redis was down is re-created by the worker's reconciler from that row.
import { type ConnectionOptions, type Job, Queue } from 'bullmq';
import { config as processConfig, type Config } from './config.ts';
import { logger, repeatingErrorLog } from './logger.ts';
import { withTimeout } from './timeout.ts';
import { JOBS, type JobData } from './jobs.ts';

/**
 * BullMQ's key prefix: every queue of an install lives under REDIS_PREFIX. The braces are a Redis
 * Cluster hash tag: all of a queue's keys must sit in one slot for BullMQ's scripts (CROSSSLOT
 * otherwise); on a single node they change nothing.
 */
export const queuePrefix = (config: Pick<Config, 'redisPrefix'>) => `{${config.redisPrefix}}:bull`;

export const QUEUE_NAMES = {
  /** One job per async_deletion row: events (weekly / off-peak) and recordings (as soon as possible). */
  deletions: 'deletions',
  /** Experiment result computation, scheduled daily and on demand. */
  experimentResults: 'experiment-results',
  /** Database upkeep: planner statistics of fast-growing tables, monthly event partitions. */
  maintenance: 'maintenance',
} as const;

/** One job id per deletion row: BullMQ ignores a second add with the same id, so enqueueing is idempotent. */
export const deletionJobId = (deletionId: string | number) => `deletion-${deletionId}`;

/** Every queue of QUEUE_NAMES, by key: the API's producers and the worker's own handles. */
export type Queues = Record<keyof typeof QUEUE_NAMES, Queue>;

export function createQueues(connection: ConnectionOptions, config: Pick<Config, 'redisPrefix' | 'jobs'>): Queues {
  const prefix = queuePrefix(config);
  return Object.fromEntries(
    Object.entries(QUEUE_NAMES).map(([key, name]) => [key, createQueue(name, connection, prefix, config.jobs)]),
  ) as Queues;
}

/** Queue connection errors repeat with every retry while Redis is away: logged once per 30 s. */
const logQueueError = repeatingErrorLog((fields) => logger.warn(fields, 'queue connection error'));
function createQueue(name: string, connection: ConnectionOptions, prefix: string, jobs: Config['jobs']): Queue {
  const queue = new Queue(name, {
    connection,
    prefix,
    defaultJobOptions: {
      // Quick retries for passing faults; a deletion that still fails is retried later from its row.
      attempts: jobs.attempts,
      backoff: { type: 'exponential', delay: jobs.backoffMs, jitter: 0.5 },
      removeOnComplete: { age: 7 * 24 * 3600, count: 10_000 },
      removeOnFail: false,
    },
  });
  queue.on('error', (error) => logQueueError({ queue: name, err: error.message }));
  return queue;
}

/** How long a request may wait for Redis before its deletion rows are left to the reconciler. */
const ENQUEUE_TIMEOUT_MS = processConfig.enqueueTimeoutMs;

/**
 * Hands deletion rows to the worker now. Never throws: if Redis is down the rows stay pending in
 * PostgreSQL and the worker's reconciler enqueues them later.
 */
export async function enqueueDeletions(queue: Queue, deletionIds: (string | number)[]): Promise<boolean> {
  if (deletionIds.length === 0) return true;
  try {
    await withTimeout(
      queue.addBulk(
        deletionIds.map((id) => ({
          name: JOBS.deletion.name,
          data: { deletionId: String(id) } satisfies JobData['deletion'],
          opts: { jobId: deletionJobId(id) },
        })),
      ),
      ENQUEUE_TIMEOUT_MS,
      'Redis',
    );
    return true;
  } catch (error) {
    logger.warn({ err: (error as Error).message, deletionIds }, 'enqueue failed; the reconciler will pick these up');
    return false;
  }
}

/**
 * Makes sure each request has a live job: a missing one is added, a finished one (completed or
 * failed while its row is not done: a retry, or a job removed mid-way) is replaced, since BullMQ
 * ignores an add whose id still exists. `stillDue` re-reads which of the finished ones still need
 * work: a list read before a job finished would otherwise run that job again. Returns the ids that
 * got a new job.
 */
export async function requeueDeletions(
  queue: Queue,
  deletionIds: string[],
  stillDue: (ids: string[]) => Promise<string[]> = async (ids) => ids,
): Promise<string[]> {
  const missing: string[] = [];
  const finished = new Map<string, Job>();
  for (const id of deletionIds) {
    const job = await queue.getJob(deletionJobId(id));
    if (!job) missing.push(id);
    else if (['completed', 'failed', 'unknown'].includes(await job.getState())) finished.set(id, job);
  }
  // A job's row is updated before BullMQ marks the job finished, so this read sees the row as done.
  for (const id of finished.size ? await stillDue([...finished.keys()]) : []) {
    await finished
      .get(id)
      ?.remove()
      .catch(() => undefined);
    missing.push(id);
  }
  return (await enqueueDeletions(queue, missing)) ? missing : [];
}
