// `npm run start:worker`: one worker process. Start it N times to scale out; BullMQ hands each
// job to one worker, and a stalled job (its worker died) is picked up by another.
import { Queue, Worker } from 'bullmq';
import { config } from '../shared/config.ts';
import { initOrm } from '../shared/db/orm.ts';
import { logger } from '../shared/logger.ts';
import { QUEUE_PREFIX } from '../shared/queues.ts';
import { createWorkerRedis } from '../shared/redis.ts';
import type { WorkerDeps } from './deps.ts';
import { processors, schedules } from './jobs/index.ts';

const orm = await initOrm();
const connection = createWorkerRedis();
connection.on('error', (error) => logger.warn({ err: error.message }, 'redis connection error'));
const deps: WorkerDeps = { config, orm, connection, logger };

// Upserting a scheduler is idempotent: every worker may do it, one scheduler results.
for (const schedule of schedules()) {
  const queue = new Queue(schedule.queue, { connection, prefix: QUEUE_PREFIX });
  await queue.upsertJobScheduler(schedule.schedulerId, { pattern: schedule.pattern, tz: 'UTC' }, { name: schedule.jobName, data: schedule.data ?? {} });
  await queue.close();
}

const workers = processors.map((entry) => {
  const worker = new Worker(entry.queue, (job) => entry.process(job, deps), {
    connection,
    prefix: QUEUE_PREFIX,
    concurrency: entry.concurrency ?? config.worker.concurrency,
  });
  worker.on('failed', (job, error) => logger.error({ queue: entry.queue, jobId: job?.id, err: error.message }, 'job failed'));
  worker.on('error', (error) => logger.error({ queue: entry.queue, err: error.message }, 'worker error'));
  return worker;
});
logger.info({ queues: processors.map((p) => p.queue), concurrency: config.worker.concurrency }, 'worker started');

let stopping = false;
async function shutdown(signal: string) {
  if (stopping) return;
  stopping = true;
  logger.info({ signal }, 'worker shutting down: finishing active jobs');
  // Past the limit the active jobs are left to BullMQ's stalled-job check, which hands them to another worker.
  const forced = setTimeout(() => {
    logger.warn('shutdown time limit reached; exiting with jobs active');
    process.exit(1);
  }, config.worker.shutdownTimeoutMs);
  forced.unref();
  await Promise.allSettled(workers.map((w) => w.close()));
  await orm.close().catch(() => undefined);
  connection.disconnect();
  process.exit(0);
}
process.on('SIGTERM', () => void shutdown('SIGTERM'));
process.on('SIGINT', () => void shutdown('SIGINT'));
// With no processors registered the event loop would empty; keep the process up until signalled.
setInterval(() => undefined, 1 << 30);
