// GET /metrics/global: figures read from the shared stores, the same whichever API process serves
// them — queue sizes and totals and waiting ages (Redis), deletion requests by status and age
// (PostgreSQL), and every live worker's own figures (pushed into Redis by worker/metrics.ts). No
// sample carries anything of the serving process, so N replicas scraped give N identical copies,
// which `max without (instance)` (or scraping one address) reduces to one. A store that does not
// answer leaves its figures out rather than reporting zeros, and says so in metrics_source_up.
import { shippingLag } from '../../shared/events/index.ts';
import type { EntityManager } from '@mikro-orm/postgresql';
import type { Queue } from 'bullmq';
import { Counter, Gauge, Registry } from 'prom-client';
import { deletionAges, deletionCountsByStatus, type DeletionStatus } from '../../shared/deletions/index.ts';
import { logger } from '../../shared/platform/logger.ts';
import { mergeExpositions, readWorkerMetrics } from '../../shared/platform/metrics.ts';
import type { RedisConnection } from '../../shared/platform/redis.ts';
import { withTimeout } from '../../shared/platform/timeout.ts';
import type { AppDeps } from '../deps.ts';

const SOURCE_TIMEOUT_MS = 2000;
const STATUSES: DeletionStatus[] = ['pending', 'running', 'completed', 'failed', 'cancelled'];

/** BullMQ keeps a delayed job's due time (ms) in its score, shifted left 12 bits. */
const dueTimeOfScore = (score: unknown) => Math.floor(Number(score) / 0x1000);

/**
 * When the longest-waiting runnable job became runnable (ms), or null when none waits: the oldest
 * job of the wait list (since it was added or, delayed, came due; a retried job since its last
 * attempt began), or a delayed job past its due time that no worker promoted (none running).
 */
async function oldestRunnableSince(redis: RedisConnection, queue: Queue, now: number): Promise<number | null> {
  const [[oldest], earliest] = await Promise.all([
    queue.getJobs(['wait'], 0, 0, true),
    redis.zrange(queue.keys.delayed, '0', '0', 'WITHSCORES'),
  ]);
  const since: number[] = [];
  if (oldest) since.push(Math.max(oldest.timestamp + (oldest.opts.delay ?? 0), oldest.processedOn ?? 0));
  // [member, score] (RESP2) or [[member, score]] (RESP3, ioredis 6's default).
  const delayed: unknown[] = earliest.flat();
  if (delayed.length === 2 && dueTimeOfScore(delayed[1]) < now) since.push(dueTimeOfScore(delayed[1]));
  return since.length > 0 ? Math.min(...since) : null;
}

export async function renderGlobalMetrics(deps: AppDeps, em: EntityManager): Promise<string> {
  const registry = new Registry();
  const gauge = (name: string, help: string, labelNames: string[] = []) =>
    new Gauge({ name, help, labelNames, registers: [registry] });
  const counter = (name: string, help: string) =>
    new Counter({ name, help, labelNames: ['queue'], registers: [registry] });
  const sourceUp = gauge('metrics_source_up', '1 when the store was read for this scrape; 0: its figures are missing', [
    'source',
  ]);

  const now = Date.now();
  const redis = Promise.all([
    Promise.all(
      Object.values(deps.queues).map(async (queue) => ({
        queue: queue.name,
        counts: await queue.getJobCounts(),
        // Only the totals: the rest of the list is a week of per-minute points.
        completed: (await queue.getMetrics('completed', 0, 0)).meta.count,
        failed: (await queue.getMetrics('failed', 0, 0)).meta.count,
        since: await oldestRunnableSince(deps.redis, queue, now),
      })),
    ),
    readWorkerMetrics(deps.redis, deps.config.redisPrefix),
  ]);
  const postgres = Promise.all([
    deletionCountsByStatus(em),
    deletionAges(em),
    deps.events.engine === 'clickhouse' ? shippingLag(em) : null,
  ]);
  const [redisRead, postgresRead, clickhouseRead] = await Promise.allSettled([
    withTimeout(redis, SOURCE_TIMEOUT_MS, 'Redis'),
    withTimeout(postgres, SOURCE_TIMEOUT_MS, 'PostgreSQL'),
    withTimeout(deps.events.ping(), SOURCE_TIMEOUT_MS, 'ClickHouse'),
  ]);
  if (deps.events.engine === 'clickhouse')
    gauge(
      'clickhouse_up',
      '1 when the ClickHouse event store answered this scrape (EVENT_STORE=clickhouse); 0: it did not',
    ).set(clickhouseRead.status === 'fulfilled' ? 1 : 0);
  for (const [source, read] of [
    ['redis', redisRead],
    ['postgres', postgresRead],
  ] as const) {
    sourceUp.set({ source }, read.status === 'fulfilled' ? 1 : 0);
    if (read.status === 'rejected')
      logger.warn({ source, err: (read.reason as Error).message }, 'global metrics: store not read');
  }

  let workerText = '';
  if (redisRead.status === 'fulfilled') {
    const [figures, workers] = redisRead.value;
    const jobs = gauge('bullmq_jobs', 'Jobs in the queue by state', ['queue', 'state']);
    const completed = counter('bullmq_job_completed_total', 'Jobs completed, counted by the workers in Redis');
    const failed = counter(
      'bullmq_job_failed_total',
      'Jobs failed for the last time (retries spent), counted by the workers in Redis',
    );
    const age = gauge(
      'bullmq_oldest_waiting_job_age_seconds',
      'Seconds the longest-waiting runnable job (waiting, or delayed past its due time) has waited; 0: none',
      ['queue'],
    );
    for (const f of figures) {
      for (const [state, n] of Object.entries(f.counts)) jobs.set({ queue: f.queue, state }, n);
      completed.inc({ queue: f.queue }, f.completed);
      failed.inc({ queue: f.queue }, f.failed);
      age.set({ queue: f.queue }, f.since === null ? 0 : Math.max(0, (now - f.since) / 1000));
    }
    gauge('workers_reporting', 'Worker processes whose figures reached Redis recently').set(workers.size);
    workerText = mergeExpositions([...workers.values()]);
  }
  if (postgresRead.status === 'fulfilled') {
    const [counts, ages, shipLag] = postgresRead.value;
    if (shipLag !== null)
      gauge(
        'event_shipping_lag_seconds',
        'Seconds since the oldest event not yet shipped to ClickHouse was stored (EVENT_STORE=clickhouse); 0: none waiting',
      ).set(shipLag);
    const byStatus = gauge('deletion_requests', 'Deletion requests by status', ['status']);
    const found = new Map(counts.map((c) => [c.status, c.n]));
    for (const status of STATUSES) byStatus.set({ status }, found.get(status) ?? 0);
    gauge(
      'deletion_oldest_open_request_age_seconds',
      'Seconds since the oldest deletion request not yet done was made (scheduled ones wait for their window)',
    ).set(ages.oldestOpenSeconds ?? 0);
    gauge(
      'deletion_oldest_due_request_age_seconds',
      'Seconds the longest-due deletion request (immediate, released, retry time come, lease lapsed) has waited',
    ).set(ages.oldestDueSeconds ?? 0);
  }
  const text = await registry.metrics();
  return workerText ? `${text}\n${workerText}\n` : text;
}
