// `npm run start:api`: one API process. Run several behind a load balancer to scale out.
import { config } from '../shared/platform/config.ts';
import { initOrm } from '../shared/platform/db/orm.ts';
import { logger, repeatingErrorLog } from '../shared/platform/logger.ts';
import { createApiRedis } from '../shared/platform/redis.ts';
import { createApp, listen } from './app.ts';
import { accessRecorderOf } from './http/access-log.ts';
import { createQueues } from '../shared/platform/queues.ts';
import { startAuthCache } from './http/auth-cache.ts';
import { startFlagCache } from './flags/cache.ts';
import { startSuppressionCache } from './capture/suppression-cache.ts';
import { startProjectCache } from './capture/project-cache.ts';
import { createEventStore } from '../shared/events/index.ts';

const orm = await initOrm();
const redis = createApiRedis();
const logConnectionError = repeatingErrorLog((fields) => logger.warn(fields, 'redis connection error'));
redis.on('error', (error) => logConnectionError({ err: error.message }));
const queues = createQueues(redis, config);
const authCache = await startAuthCache(config.databaseDirectUrl, config.authCacheSeconds);
const flagCache = await startFlagCache(config.databaseDirectUrl);
const suppressionCache = await startSuppressionCache(config.databaseDirectUrl);
const projectCache = await startProjectCache(config.databaseDirectUrl);
const events = createEventStore(config, orm);
const app = createApp({ config, orm, events, redis, queues, authCache, flagCache, suppressionCache, projectCache });
const server = listen(app, config.port, config.host, () => {
  logger.info({ url: `http://${config.host}:${config.port}` }, 'API listening');
});
server.on('error', (error: NodeJS.ErrnoException) => {
  // One line an operator can act on, instead of Node's stack trace for an unhandled 'error'.
  const why =
    error.code === 'EADDRINUSE'
      ? `port ${config.port} on ${config.host} is taken by another process: stop it or set PORT to a free port`
      : error.code === 'EACCES'
        ? `port ${config.port} on ${config.host} needs privileges this process lacks: set PORT to 1024 or above`
        : `cannot listen on ${config.host}:${config.port} (${error.message}): check HOST and PORT`;
  logger.fatal({ code: error.code, port: config.port, host: config.host }, `API not started: ${why}`);
  process.exit(1);
});

let stopping = false;
async function shutdown(signal: string) {
  if (stopping) return;
  stopping = true;
  logger.info({ signal }, 'API shutting down');
  setTimeout(() => process.exit(1), 10_000).unref();
  // Requests under way finish (up to 5 s), then the read-access rows they handed over are written before the
  // pool closes; a read after that fails rather than go unrecorded.
  await Promise.race([new Promise((resolve) => server.close(resolve)), new Promise((r) => setTimeout(r, 5_000))]);
  await accessRecorderOf(orm).close(3_000);
  await authCache?.stop();
  await flagCache.stop();
  await suppressionCache.stop();
  await projectCache.stop();
  await events.close().catch(() => undefined);
  await orm.close().catch(() => undefined);
  await Promise.allSettled(Object.values(queues).map((q) => q.close()));
  redis.disconnect();
  process.exit(0);
}
process.on('SIGTERM', () => void shutdown('SIGTERM'));
process.on('SIGINT', () => void shutdown('SIGINT'));
