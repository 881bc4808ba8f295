// Ships new events and distinct-id changes to the ClickHouse event store (shared/events/shipper.ts);
// scheduled only with EVENT_STORE=clickhouse, and a no-op otherwise.
import type { Job } from 'bullmq';
import type { JobData } from '../../shared/jobs.ts';
import type { ClickHouseEventStore } from '../../shared/events/clickhouse.ts';
import { shipEvents, type ShipResult } from '../../shared/events/shipper.ts';
import type { WorkerDeps } from '../deps.ts';

const migrated = new WeakSet<object>();

export async function shipEventsJob(
  _job: Job<JobData['shipEvents']>,
  deps: Pick<WorkerDeps, 'orm' | 'events' | 'config' | 'logger'>,
): Promise<ShipResult | { skipped: string }> {
  if (deps.events.engine !== 'clickhouse') return { skipped: 'EVENT_STORE is postgres' };
  const store = deps.events as ClickHouseEventStore;
  // The ClickHouse schema, once per process (`npm run migrate` applies it too).
  if (!migrated.has(store)) {
    await store.migrate();
    migrated.add(store);
  }
  const result = await shipEvents(deps.orm, store, {
    batchSize: deps.config.events.shipBatchSize,
    settleSeconds: deps.config.events.shipSettleSeconds,
  });
  if (result.events > 0 || result.distinctIds > 0) deps.logger.info(result, 'events shipped to ClickHouse');
  return result;
}
