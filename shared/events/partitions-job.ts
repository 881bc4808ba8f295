// The daily maintenance job (scheduler `event-partitions`). Keeps a monthly partition of the event table
// ready ahead of the events that need it: deleting or scanning a month then touches that month's table
// and indexes, not one table of every event ever sent. The same daily run purges ingestion warnings and
// finished webhook deliveries past their 30 days (those features' parts, bound together in worker/jobs/).
import { UnrecoverableError, type Job } from 'bullmq';
import { ensureEventPartitions as createDuePartitions } from './store.ts';
import type { EventStoreDeps } from './event-store.ts';
import type { Deps } from '../platform/deps.ts';

/** What the worker hands this job: the platform's dependencies and the event store. */
type JobDeps = Deps & EventStoreDeps;

export async function ensureEventPartitionsJob(
  job: Job<{ monthsAhead?: number }> | null,
  deps: JobDeps,
): Promise<{ created: string[] }> {
  const monthsAhead = job?.data?.monthsAhead ?? deps.config.maintenance.eventPartitionsAhead;
  if (!Number.isInteger(monthsAhead) || monthsAhead < 0 || monthsAhead > 120)
    throw new UnrecoverableError(`invalid monthsAhead ${JSON.stringify(monthsAhead)}`);
  const created = await createDuePartitions(deps.orm.em.fork(), monthsAhead);
  if (created.length > 0) deps.logger.info({ created }, 'event partitions created');
  return { created };
}
