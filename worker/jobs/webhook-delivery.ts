// One webhook delivery (a webhook_delivery row): the signed POST of shared/webhooks/deliver.ts, retried by
// BullMQ with exponential backoff (WEBHOOK_ATTEMPTS, WEBHOOK_BACKOFF_MS). The reconciler gives a live job
// to every pending delivery that its own has missed for a minute: its hand-off failed (Redis down at the
// commit), or its job was lost with Redis.
import { UnrecoverableError, type Job } from 'bullmq';
import type { JobData } from '../../shared/jobs.ts';
import { requeueRowJobs, WEBHOOK_DELIVERY_JOB } from '../../shared/queues.ts';
import { DeliveryAttemptFailed, deliverWebhook } from '../../shared/webhooks/deliver.ts';
import { failDelivery, overdueDeliveryIds } from '../../shared/webhooks/store.ts';
import type { WorkerDeps } from '../deps.ts';

export async function deliverWebhookJob(job: Job<JobData['webhookDelivery']>, deps: WorkerDeps) {
  const id = job.data?.deliveryId;
  if (typeof id !== 'string' || !/^\d+$/.test(id))
    throw new UnrecoverableError(`invalid webhook delivery id ${JSON.stringify(id)}`);
  const attempt = job.attemptsMade + 1;
  return deliverWebhook(
    deps.orm.em.fork(),
    id,
    { number: attempt, last: attempt >= (job.opts.attempts ?? 1) },
    deps.config.webhooks,
  );
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
