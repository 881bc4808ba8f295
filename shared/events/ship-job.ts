// Ships new events and distinct-id changes to the ClickHouse event store (shared/events/shipper.ts),
// then removes from PostgreSQL the shipped events older than EVENT_BUFFER_HOURS
// (shared/events/buffer.ts); scheduled only with EVENT_STORE=clickhouse, and a no-op otherwise.
import type { Job } from 'bullmq';
import type { JobData } from '../platform/jobs.ts';
import { type TrimResult, trimShippedEvents } from './buffer.ts';
import type { ClickHouseEventStore } from './clickhouse.ts';
import { shipEvents, type ShipResult } from './shipper.ts';
import type { EventStoreDeps } from './event-store.ts';
import type { Deps } from '../platform/deps.ts';

/** What the worker hands this job: the platform's dependencies and the event store. */
type JobDeps = Deps & EventStoreDeps;

const migrated = new WeakSet<object>();

/** How long emptying a partition of the buffer waits for its lock (else its rows go by deletes). */
const TRIM_LOCK_TIMEOUT_MS = 2_000;

export async function shipEventsJob(
  _job: Job<JobData['shipEvents']>,
  deps: Pick<JobDeps, 'orm' | 'events' | 'config' | 'logger'>,
): Promise<(ShipResult & { trimmed: TrimResult | null }) | { skipped: string }> {
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
  if (result.skipped) return { ...result, trimmed: null };
  // After the run, what it shipped past the buffer goes from PostgreSQL (the trim only reads the mark).
  const trimmed = await trimShippedEvents(deps.orm, {
    bufferHours: deps.config.events.bufferHours,
    chunk: deps.config.deletion.chunkSize,
    lockTimeoutMs: TRIM_LOCK_TIMEOUT_MS,
  });
  if (trimmed.rowsDeleted > 0 || trimmed.partitionsEmptied.length > 0 || trimmed.partitionsBusy.length > 0)
    deps.logger.info(trimmed, 'shipped events past EVENT_BUFFER_HOURS removed from PostgreSQL');
  return { ...result, trimmed };
}
