// Guardrail checks (every GUARDRAIL_CHECK_CRON, default 5 minutes): each running experiment with
// guardrails, from its stored daily counts plus the change since (shared/experiments/guardrails.ts).
import type { Job } from 'bullmq';
import { checkGuardrails, experimentsToGuard, recordGuardrailCheck } from './guardrails.ts';
import { experimentForResults } from './results.ts';
import type { JobData } from '../platform/jobs.ts';
import { enqueueWebhookDeliveries } from '../platform/queues.ts';
import type { EventStoreDeps } from '../events/index.ts';
import type { Deps } from '../platform/deps.ts';

/** What the worker hands this job: the platform's dependencies and the event store. */
type JobDeps = Deps & EventStoreDeps;

export async function guardrailCheck(
  job: Job<JobData['guardrailCheck']>,
  deps: JobDeps,
  now = new Date(),
): Promise<{ experiments: number; tripped: number[] }> {
  const em = deps.orm.em.fork();
  const experiments = await experimentsToGuard(em, job.data?.experimentId);
  const tripped: number[] = [];
  for (const row of experiments) {
    const result = await checkGuardrails(em, deps.events, experimentForResults(row), row, now);
    const deliveries = await recordGuardrailCheck(em, row.id, result, now);
    if (deliveries) {
      tripped.push(row.id);
      await enqueueWebhookDeliveries(deps.queues.webhooks, deliveries);
      deps.logger.warn({ experimentId: row.id, checks: result.checks }, 'guardrail tripped: flag set to control');
    }
  }
  return { experiments: experiments.length, tripped };
}
