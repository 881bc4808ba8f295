import type { Redis } from 'ioredis';
import type { Config } from '../shared/config.ts';
import { createQueue, QUEUE_NAMES, queuePrefix } from '../shared/queues.ts';
import type { AppDeps } from './deps.ts';

/** The API's producers, on its fail-fast Redis connection. */
export function createApiQueues(redis: Redis, config: Pick<Config, 'redisPrefix'>): AppDeps['queues'] {
  const prefix = queuePrefix(config);
  return {
    deletions: createQueue(QUEUE_NAMES.deletions, redis, prefix),
    experimentResults: createQueue(QUEUE_NAMES.experimentResults, redis, prefix),
    maintenance: createQueue(QUEUE_NAMES.maintenance, redis, prefix),
  };
}
