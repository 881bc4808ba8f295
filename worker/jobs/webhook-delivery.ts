// One webhook delivery (a webhook_delivery row): the signed POST of shared/webhooks/deliver.ts, retried by
// BullMQ with exponential backoff (WEBHOOK_ATTEMPTS, WEBHOOK_BACKOFF_MS). The reconciler gives every
// pending delivery a live job: one whose hand-off failed (Redis down at the commit) or whose job was lost.
import { UnrecoverableError, type Job } from 'bullmq';
import type { EntityManager } from '@mikro-orm/postgresql';
import type { JobData } from '../../shared/jobs.ts';
import { requeueRowJobs, WEBHOOK_DELIVERY_JOB } from '../../shared/queues.ts';
import { DeliveryAttemptFailed, deliverWebhook } from '../../shared/webhooks/deliver.ts';
import { failDelivery, pendingDeliveryIds } from '../../shared/webhooks/store.ts';
import type { WorkerDeps } from '../deps.ts';

export async function deliverWebhookJob(job: Job<JobData['webhookDelivery']>, deps: WorkerDeps) {
  const id = job.data?.deliveryId;
  if (typeof id !== 'string' || !/^\d+$/.test(id))
    throw new UnrecoverableError(`invalid webhook delivery id ${JSON.stringify(id)}`);
  const attempt = job.attemptsMade + 1;
  return deliverWebhook(
    deps.orm.em.fork() as EntityManager,
    id,
    { number: attempt, last: attempt >= (job.opts.attempts ?? 1) },
    deps.config.webhooks,
  );
}

/** A failed attempt has recorded itself; any other error (a fault of ours) ends the delivery here. */
export async function webhookJobFailed(job: Job<JobData['webhookDelivery']>, error: Error, deps: WorkerDeps) {
  if (error instanceof DeliveryAttemptFailed || typeof job.data?.deliveryId !== 'string') return;
  await failDelivery(deps.orm.em.fork() as EntityManager, job.data.deliveryId, error.message);
}

export async function reconcileWebhookDeliveries(deps: WorkerDeps): Promise<{ enqueued: number }> {
  const em = deps.orm.em.fork() as EntityManager;
  const pending = await pendingDeliveryIds(em);
  const enqueued = await requeueRowJobs(deps.queues.webhooks, WEBHOOK_DELIVERY_JOB, pending, (ids) =>
    pendingDeliveryIds(em, ids),
  );
  if (enqueued.length)
    deps.logger.info({ enqueued: enqueued.length }, 'reconciler enqueued webhook deliveries without a live job');
  return { enqueued: enqueued.length };
}
