import type { Redis } from 'ioredis';
import { createQueue, QUEUE_NAMES } from '../shared/queues.ts';
import type { AppDeps } from './deps.ts';

/** The API's producers, on its fail-fast Redis connection. */
export function createApiQueues(redis: Redis): AppDeps['queues'] {
  return {
    deletions: createQueue(QUEUE_NAMES.deletions, redis),
    experimentResults: createQueue(QUEUE_NAMES.experimentResults, redis),
  };
}
