// The daily maintenance job (scheduler `event-partitions`). Keeps a monthly partition of the event table
// ready ahead of the events that need it: deleting or scanning a month then touches that month's table
// and indexes, not one table of every event ever sent. It also purges ingestion warnings and finished
// webhook deliveries past their 30 days.
import { UnrecoverableError, type Job } from 'bullmq';
import { ensureEventPartitions as createDuePartitions } from '../../shared/events/index.ts';
import { purgeOldWarnings } from '../../shared/ingestion/index.ts';
import { purgeOldDeliveries } from '../../shared/webhooks/index.ts';
import type { WorkerDeps } from '../deps.ts';

export async function ensureEventPartitions(
  job: Job<{ monthsAhead?: number }> | null,
  deps: WorkerDeps,
): Promise<{ created: string[]; ingestionWarningsPurged: number; webhookDeliveriesPurged: number }> {
  const monthsAhead = job?.data?.monthsAhead ?? deps.config.maintenance.eventPartitionsAhead;
  if (!Number.isInteger(monthsAhead) || monthsAhead < 0 || monthsAhead > 120)
    throw new UnrecoverableError(`invalid monthsAhead ${JSON.stringify(monthsAhead)}`);
  const created = await createDuePartitions(deps.orm.em.fork(), monthsAhead);
  if (created.length > 0) deps.logger.info({ created }, 'event partitions created');
  const ingestionWarningsPurged = await purgeOldWarnings(deps.orm.em.fork());
  if (ingestionWarningsPurged > 0) deps.logger.info({ ingestionWarningsPurged }, 'old ingestion warnings purged');
  const webhookDeliveriesPurged = await purgeOldDeliveries(deps.orm.em.fork());
  if (webhookDeliveriesPurged > 0) deps.logger.info({ webhookDeliveriesPurged }, 'old webhook deliveries purged');
  return { created, ingestionWarningsPurged, webhookDeliveriesPurged };
}
