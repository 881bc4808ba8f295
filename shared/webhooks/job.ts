// One webhook delivery (a webhook_delivery row): the signed POST of shared/webhooks/deliver.ts, tried again
// with exponential backoff (WEBHOOK_ATTEMPTS, WEBHOOK_BACKOFF_MS) by the job itself, which waits in the
// delayed set for each next attempt. This worker's settings decide, and the attempts are counted on the
// row: the job's own attempts option is the queuing process's, and a job the reconciler made again
// starts its count anew. The reconciler gives a live job to every pending delivery that its own has
// missed for a minute: its hand-off failed (Redis down at the commit), or its job was lost with Redis.
// Fair across projects: at most WEBHOOK_PROJECT_CONCURRENCY attempts of one project run at once over all
// workers (a lease per attempt in Redis); a delivery of a project at its limit waits in the delayed set
// and asks again, so one project's receivers that hang cannot take every worker slot.
import { purgeOldDeliveries } from './store.ts';
import { DelayedError, UnrecoverableError, type Job } from 'bullmq';
import type { JobData } from '../platform/jobs.ts';
import { queuePrefix, requeueRowJobs, WEBHOOK_DELIVERY_JOB } from '../platform/queues.ts';
import { DeliveryAttemptFailed, deliverWebhook } from './deliver.ts';
import { deliveryProgress, failDelivery, overdueDeliveryIds } from './store.ts';
import type { EventStoreDeps } from '../events/index.ts';
import type { Deps } from '../platform/deps.ts';

/** What the worker hands this job: the platform's dependencies and the event store. */
type JobDeps = Deps & EventStoreDeps;

export async function deliverWebhookJob(job: Job<JobData['webhookDelivery']>, deps: JobDeps) {
  const id = job.data?.deliveryId;
  if (typeof id !== 'string' || !/^\d+$/.test(id))
    throw new UnrecoverableError(`invalid webhook delivery id ${JSON.stringify(id)}`);
  const em = deps.orm.em.fork();
  const progress = await deliveryProgress(em, id);
  if (!progress) return { skipped: 'the webhook was deleted' };
  const attempt = progress.attempts + 1;
  const slot = await takeProjectSlot(deps, progress.project_id, id);
  if (!slot) {
    // Its project has as many attempts running as it may: ask again in a moment (no attempt is spent).
    await job.moveToDelayed(Date.now() + PROJECT_SLOT_WAIT_MS * (0.5 + Math.random() * 0.5), job.token);
    throw new DelayedError();
  }
  try {
    return await deliverWebhook(
      em,
      id,
      { number: attempt, last: attempt >= deps.config.webhooks.attempts },
      deps.config.webhooks,
    );
  } catch (error) {
    // Not the last: wait for the next attempt (the job's attempts are not spent: they are not ours).
    if (error instanceof DeliveryAttemptFailed && error.retryAt) {
      await job.moveToDelayed(error.retryAt.getTime(), job.token);
      throw new DelayedError();
    }
    throw error;
  } finally {
    await slot.release();
  }
}

/** How long a delivery of a project at its limit waits before it asks again (up to; half at least). */
const PROJECT_SLOT_WAIT_MS = 1000;

// KEYS[1]: the project's running attempts (a sorted set: delivery id → lease end, ms of Redis's clock).
// ARGV: the delivery id, the limit, the lease in ms. Drops the expired leases (a worker that died
// mid-attempt), then takes a lease (or renews its own) when under the limit: 1, else 0.
const TAKE_SLOT = `
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('zremrangebyscore', KEYS[1], '-inf', now)
if redis.call('zscore', KEYS[1], ARGV[1]) or redis.call('zcard', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('zadd', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
  redis.call('pexpire', KEYS[1], tonumber(ARGV[3]))
  return 1
end
return 0`;

/**
 * A lease on one of the project's WEBHOOK_PROJECT_CONCURRENCY attempt slots for delivery `id`, or null
 * when they are all taken. The lease outlasts an attempt (its time limit, and a minute for the rest), so
 * a worker that dies mid-attempt frees its slot then.
 */
async function takeProjectSlot(
  deps: JobDeps,
  projectId: number,
  id: string,
): Promise<{ release: () => Promise<void> } | null> {
  // Under the queues' hash tag: one Redis Cluster slot with them.
  const key = `${queuePrefix(deps.config)}:webhook-project-attempts:${projectId}`;
  const leaseMs = deps.config.webhooks.timeoutMs + 60_000;
  const taken = await deps.connection.eval(TAKE_SLOT, 1, key, id, deps.config.webhooks.projectConcurrency, leaseMs);
  if (taken !== 1) return null;
  return {
    release: async () => {
      await deps.connection.zrem(key, id).catch(() => undefined);
    },
  };
}

/** A failed attempt has recorded itself; any other error (a fault of ours) ends the delivery here. */
export async function webhookJobFailed(job: Job<JobData['webhookDelivery']>, error: Error, deps: JobDeps) {
  if (error instanceof DeliveryAttemptFailed || typeof job.data?.deliveryId !== 'string') return;
  await failDelivery(deps.orm.em.fork(), job.data.deliveryId, error.message);
}

/** How long a pending delivery is left to its own job before the reconciler gives it another. */
export const RECONCILE_GRACE_SECONDS = 60;

export async function reconcileWebhookDeliveries(
  deps: JobDeps,
  graceSeconds = RECONCILE_GRACE_SECONDS,
): Promise<{ enqueued: number }> {
  const em = deps.orm.em.fork();
  const overdue = await overdueDeliveryIds(em, { graceSeconds });
  const enqueued = await requeueRowJobs(deps.queues.webhooks, WEBHOOK_DELIVERY_JOB, overdue, (ids) =>
    overdueDeliveryIds(em, { among: ids, graceSeconds }),
  );
  if (enqueued.length)
    deps.logger.info({ enqueued: enqueued.length }, 'reconciler enqueued webhook deliveries without a live job');
  return { enqueued: enqueued.length };
}

/** The daily upkeep's part (scheduler `event-partitions`): finished deliveries past their 30 days. */
export async function purgeDeliveriesJob(
  _job: unknown,
  deps: Pick<Deps, 'orm' | 'logger'>,
): Promise<{ webhookDeliveriesPurged: number }> {
  const webhookDeliveriesPurged = await purgeOldDeliveries(deps.orm.em.fork());
  if (webhookDeliveriesPurged > 0) deps.logger.info({ webhookDeliveriesPurged }, 'old webhook deliveries purged');
  return { webhookDeliveriesPurged };
}
