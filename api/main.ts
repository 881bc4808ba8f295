// `npm run start:api`: one API process. Run several behind a load balancer to scale out.
import { config } from '../shared/config.ts';
import { initOrm } from '../shared/db/orm.ts';
import { logger } from '../shared/logger.ts';
import { createApiRedis } from '../shared/redis.ts';
import { createApp, listen } from './app.ts';
import { createQueues } from '../shared/queues.ts';
import { startAuthCache } from './http/auth-cache.ts';
import { startFlagCache } from './flags/cache.ts';

const orm = await initOrm();
const redis = createApiRedis();
redis.on('error', (error) => logger.warn({ err: error.message }, 'redis connection error'));
const queues = createQueues(redis, config);
const authCache = await startAuthCache(config.databaseDirectUrl, config.authCacheSeconds);
const flagCache = await startFlagCache(config.databaseDirectUrl);
const app = createApp({ config, orm, redis, queues, authCache, flagCache });
const server = listen(app, config.port, config.host, () => {
  logger.info({ url: `http://${config.host}:${config.port}` }, 'API listening');
});

let stopping = false;
async function shutdown(signal: string) {
  if (stopping) return;
  stopping = true;
  logger.info({ signal }, 'API shutting down');
  server.close();
  setTimeout(() => process.exit(1), 10_000).unref();
  await authCache?.stop();
  await flagCache.stop();
  await orm.close().catch(() => undefined);
  await Promise.allSettled(Object.values(queues).map((q) => q.close()));
  redis.disconnect();
  process.exit(0);
}
process.on('SIGTERM', () => void shutdown('SIGTERM'));
process.on('SIGINT', () => void shutdown('SIGINT'));
