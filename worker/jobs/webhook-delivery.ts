// One webhook delivery (a webhook_delivery row): the signed POST of shared/webhooks/deliver.ts, tried again
// with exponential backoff (WEBHOOK_ATTEMPTS, WEBHOOK_BACKOFF_MS) by the job itself, which waits in the
// delayed set for each next attempt. This worker's settings decide, and the attempts are counted on the
// row: the job's own attempts option is the queuing process's, and a job the reconciler made again
// starts its count anew. The reconciler gives a live job to every pending delivery that its own has
// missed for a minute: its hand-off failed (Redis down at the commit), or its job was lost with Redis.
import { DelayedError, UnrecoverableError, type Job } from 'bullmq';
import type { JobData } from '../../shared/jobs.ts';
import { requeueRowJobs, WEBHOOK_DELIVERY_JOB } from '../../shared/queues.ts';
import { DeliveryAttemptFailed, deliverWebhook } from '../../shared/webhooks/deliver.ts';
import { deliveryProgress, failDelivery, overdueDeliveryIds } from '../../shared/webhooks/store.ts';
import type { WorkerDeps } from '../deps.ts';

export async function deliverWebhookJob(job: Job<JobData['webhookDelivery']>, deps: WorkerDeps) {
  const id = job.data?.deliveryId;
  if (typeof id !== 'string' || !/^\d+$/.test(id))
    throw new UnrecoverableError(`invalid webhook delivery id ${JSON.stringify(id)}`);
  const em = deps.orm.em.fork();
  const progress = await deliveryProgress(em, id);
  if (!progress) return { skipped: 'the webhook was deleted' };
  const attempt = progress.attempts + 1;
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
  }
}

/** A failed attempt has recorded itself; any other error (a fault of ours) ends the delivery here. */
export async function webhookJobFailed(job: Job<JobData['webhookDelivery']>, error: Error, deps: WorkerDeps) {
  if (error instanceof DeliveryAttemptFailed || typeof job.data?.deliveryId !== 'string') return;
  await failDelivery(deps.orm.em.fork(), job.data.deliveryId, error.message);
}

/** How long a pending delivery is left to its own job before the reconciler gives it another. */
export const RECONCILE_GRACE_SECONDS = 60;

export async function reconcileWebhookDeliveries(
  deps: WorkerDeps,
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
