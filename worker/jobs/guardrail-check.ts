// Guardrail checks (every GUARDRAIL_CHECK_CRON, default 5 minutes): each running experiment with
// guardrails, from its stored daily counts plus the change since (shared/experiments/guardrails.ts).
import type { Job } from 'bullmq';
import { checkGuardrails, experimentsToGuard, recordGuardrailCheck } from '../../shared/experiments/index.ts';
import { experimentForResults } from '../../shared/experiments/index.ts';
import type { JobData } from '../../shared/platform/jobs.ts';
import { enqueueWebhookDeliveries } from '../../shared/platform/queues.ts';
import type { WorkerDeps } from '../deps.ts';

export async function guardrailCheck(
  job: Job<JobData['guardrailCheck']>,
  deps: WorkerDeps,
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
