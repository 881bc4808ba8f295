import { Redis, type RedisOptions } from 'ioredis';
import { config } from './config.ts';

/**
 * The API's connection fails fast: a request must not hang while Redis is away
 * (throttling fails open, deletion requests stay in PostgreSQL for the reconciler).
 */
export function createApiRedis(url = config.redisUrl): Redis {
  return new Redis(url, {
    maxRetriesPerRequest: 1,
    enableOfflineQueue: false,
    connectTimeout: 2000,
    lazyConnect: false,
    retryStrategy: (times) => Math.min(times * 200, 2000),
  } satisfies RedisOptions);
}

/** BullMQ workers need blocking commands to wait forever: maxRetriesPerRequest must be null. */
export function createWorkerRedis(url = config.redisUrl): Redis {
  return new Redis(url, { maxRetriesPerRequest: null, retryStrategy: (times) => Math.min(times * 500, 5000) });
}
