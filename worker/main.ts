// `npm run start:worker`: one worker process. Start it N times to scale out; BullMQ hands each
// job to one worker, and a stalled job (its worker died) is picked up by another.
import { config } from '../shared/platform/config.ts';
import { initOrm } from '../shared/platform/db/orm.ts';
import { logger, repeatingErrorLog } from '../shared/platform/logger.ts';
import { createWorkerRedis } from '../shared/platform/redis.ts';
import type { WorkerDeps } from './deps.ts';
import { startWorkerMetrics } from './metrics.ts';
import { startWorkers } from './runtime.ts';
import { createQueues } from '../shared/platform/queues.ts';
import { createEventStore } from '../shared/events/index.ts';

const orm = await initOrm();
const connection = createWorkerRedis();
const logConnectionError = repeatingErrorLog((fields) => logger.warn(fields, 'redis connection error'));
connection.on('error', (error) => logConnectionError({ err: error.message }));
const deps: WorkerDeps = {
  config,
  orm,
  events: createEventStore(config, orm),
  connection,
  logger,
  queues: createQueues(connection, config),
};

const metrics = startWorkerMetrics(deps);
// The workers take jobs as soon as they are made, before the schedules are registered, so the signal
// handlers are in place first: a SIGTERM in between still finishes active jobs and exits 0.
const running = startWorkers(deps, { onJobDuration: metrics.observe, schedules: true });

let stopping = false;
async function shutdown(signal: string) {
  if (stopping) return;
  stopping = true;
  logger.info({ signal }, 'worker shutting down: finishing active jobs');
  // Bounded whatever Redis is doing (running.close() is); the disconnect ends its pending commands.
  await running.close();
  await metrics.close();
  connection.disconnect();
  await deps.events.close().catch(() => undefined);
  await orm.close().catch(() => undefined);
  process.exit(0);
}
process.on('SIGTERM', () => void shutdown('SIGTERM'));
process.on('SIGINT', () => void shutdown('SIGINT'));

await running.started;
logger.info(
  { concurrency: config.worker.concurrency, workerId: metrics.workerId, metricsHttp: metrics.address() },
  'worker started',
);
