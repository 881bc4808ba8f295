// Queue names, job payloads and enqueue helpers both processes share.
// Jobs carry only ids: the source of truth for every request is its row in PostgreSQL, so a job
// lost while Redis was down is re-created by the worker's reconciler from that row.
import { type ConnectionOptions, type Job, Queue } from 'bullmq';
import { config as processConfig, type Config } from './config.ts';
import { logger, repeatingErrorLog } from './logger.ts';
import { withTimeout } from './timeout.ts';
import { JOBS, type JobData, QUEUE_NAMES, type Queues } from './jobs.ts';

/**
 * BullMQ's key prefix: every queue of an install lives under REDIS_PREFIX. The braces are a Redis
 * Cluster hash tag: all of a queue's keys must sit in one slot for BullMQ's scripts (CROSSSLOT
 * otherwise); on a single node they change nothing.
 */
export const queuePrefix = (config: Pick<Config, 'redisPrefix'>) => `{${config.redisPrefix}}:bull`;

export { QUEUE_NAMES };

/** One job id per deletion row: BullMQ ignores a second add with the same id, so enqueueing is idempotent. */
export const deletionJobId = (deletionId: string | number) => `deletion-${deletionId}`;
/** One job id per webhook delivery row. */
export const accessExportJobId = (exportId: string | number) => `access-export-${exportId}`;

export const webhookDeliveryJobId = (deliveryId: string | number) => `webhook-delivery-${deliveryId}`;

export type { Queues };

export function createQueues(
  connection: ConnectionOptions,
  config: Pick<Config, 'redisPrefix' | 'jobs'> & Partial<Pick<Config, 'webhooks'>>,
): Queues {
  const prefix = queuePrefix(config);
  // A customer's endpoint may be down for hours: webhook deliveries have retries of their own. (A failed
  // delivery attempt is retried by the worker's job itself, by the worker's settings; these options
  // only retry a fault of ours in the job.)
  const retriesOf = (key: string) => (key === 'webhooks' && config.webhooks ? config.webhooks : config.jobs);
  return Object.fromEntries(
    Object.entries(QUEUE_NAMES).map(([key, name]) => [key, createQueue(name, connection, prefix, retriesOf(key))]),
  ) as Queues;
}

/** Queue connection errors repeat with every retry while Redis is away: logged once per 30 s. */
const logQueueError = repeatingErrorLog((fields) => logger.warn(fields, 'queue connection error'));
function createQueue(
  name: string,
  connection: ConnectionOptions,
  prefix: string,
  jobs: { attempts: number; backoffMs: number },
): Queue {
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

/** How long a request may wait for Redis before its outbox rows are left to the reconciler. */
const ENQUEUE_TIMEOUT_MS = processConfig.enqueueTimeoutMs;

/**
 * A job that stands for one PostgreSQL row (an outbox row: a deletion request, a webhook delivery). One
 * job id per row, so adding it twice is idempotent, and the row stays the source of truth: a job lost
 * with Redis is made again from it by the worker's reconciler.
 */
export interface RowJob {
  /** What the rows are, for the log. */
  what: string;
  name: string;
  jobId: (id: string) => string;
  data: (id: string) => Record<string, unknown>;
}

const DELETION_JOB: RowJob = {
  what: 'deletion',
  name: JOBS.deletion.name,
  jobId: deletionJobId,
  data: (id) => ({ deletionId: id }) satisfies JobData['deletion'],
};

export const WEBHOOK_DELIVERY_JOB: RowJob = {
  what: 'webhook delivery',
  name: JOBS.webhookDelivery.name,
  jobId: webhookDeliveryJobId,
  data: (id) => ({ deliveryId: id }) satisfies JobData['webhookDelivery'],
};

/**
 * Hands rows to the worker now. Never throws: if Redis is down the rows stay pending in PostgreSQL and
 * the worker's reconciler enqueues them later.
 */
export async function enqueueRowJobs(queue: Queue, job: RowJob, ids: (string | number)[]): Promise<boolean> {
  if (ids.length === 0) return true;
  try {
    await withTimeout(
      queue.addBulk(
        ids.map((id) => ({ name: job.name, data: job.data(String(id)), opts: { jobId: job.jobId(String(id)) } })),
      ),
      ENQUEUE_TIMEOUT_MS,
      'Redis',
    );
    return true;
  } catch (error) {
    logger.warn(
      { err: (error as Error).message, what: job.what, ids },
      'enqueue failed; the reconciler will pick these up',
    );
    return false;
  }
}

/**
 * Makes sure each row has a live job: a missing one is added, a finished one (completed or failed while
 * its row still needs work: a retry, or a job removed mid-way) is replaced, since BullMQ ignores an add
 * whose id still exists. `stillDue` re-reads which of the finished ones still need work: a list read
 * before a job finished would otherwise run that job again. Returns the ids that got a new job.
 */
export async function requeueRowJobs(
  queue: Queue,
  job: RowJob,
  ids: string[],
  stillDue: (ids: string[]) => Promise<string[]> = async (list) => list,
): Promise<string[]> {
  const missing: string[] = [];
  const finished = new Map<string, Job>();
  for (const id of ids) {
    const existing = await queue.getJob(job.jobId(id));
    if (!existing) missing.push(id);
    else if (['completed', 'failed', 'unknown'].includes(await existing.getState())) finished.set(id, existing);
  }
  // A job's row is updated before BullMQ marks the job finished, so this read sees the row as done.
  for (const id of finished.size ? await stillDue([...finished.keys()]) : []) {
    await finished
      .get(id)
      ?.remove()
      .catch(() => undefined);
    missing.push(id);
  }
  return (await enqueueRowJobs(queue, job, missing)) ? missing : [];
}

/** Hands deletion rows to the worker now; never throws (see enqueueRowJobs). */
export const enqueueDeletions = (queue: Queue, deletionIds: (string | number)[]) =>
  enqueueRowJobs(queue, DELETION_JOB, deletionIds);

/** Makes sure each deletion request has a live job (see requeueRowJobs). */
export const requeueDeletions = (
  queue: Queue,
  deletionIds: string[],
  stillDue?: (ids: string[]) => Promise<string[]>,
) => requeueRowJobs(queue, DELETION_JOB, deletionIds, stillDue);

/**
 * Removes the queued jobs of deletion requests another job completed (a batch's companions), so they do
 * not each run only to find their request done. Issued together, so they travel as one pipeline. A job
 * active on a worker is locked and stays (BullMQ removes only unlocked jobs): it finds its request done.
 * Never throws: a job left behind costs only its run. Returns how many were removed.
 */
export async function removeDeletionJobs(queue: Queue, deletionIds: string[]): Promise<number> {
  if (deletionIds.length === 0) return 0;
  try {
    const removed = await withTimeout(
      Promise.all(deletionIds.map((id) => queue.remove(deletionJobId(id)))),
      ENQUEUE_TIMEOUT_MS,
      'Redis',
    );
    return removed.reduce((n, r) => n + r, 0);
  } catch (error) {
    logger.warn({ err: (error as Error).message, ids: deletionIds.length }, 'removing completed deletion jobs failed');
    return 0;
  }
}

/** Hands webhook deliveries (written in a transaction that has committed) to the worker; never throws. */
export const enqueueWebhookDeliveries = (queue: Queue, deliveryIds: string[]) =>
  enqueueRowJobs(queue, WEBHOOK_DELIVERY_JOB, deliveryIds);

const ACCESS_EXPORT_JOB: RowJob = {
  what: 'access export',
  name: JOBS.accessExport.name,
  jobId: accessExportJobId,
  data: (id) => ({ exportId: id }) satisfies JobData['accessExport'],
};

/** Hands access exports (recorded in a transaction that has committed) to the worker; never throws. */
export const enqueueAccessExports = (queue: Queue, exportIds: string[]) =>
  enqueueRowJobs(queue, ACCESS_EXPORT_JOB, exportIds);

/** Makes sure each pending access export has a live job (see requeueRowJobs). */
export const requeueAccessExports = (
  queue: Queue,
  exportIds: string[],
  stillDue?: (ids: string[]) => Promise<string[]>,
) => requeueRowJobs(queue, ACCESS_EXPORT_JOB, exportIds, stillDue);
