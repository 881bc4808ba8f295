import type { MikroORM } from '@mikro-orm/postgresql';
import type { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import type { Config } from '../shared/config.ts';
import type { Logger } from '../shared/logger.ts';
import type { QUEUE_NAMES } from '../shared/queues.ts';

export interface WorkerDeps {
  config: Config;
  orm: MikroORM;
  connection: Redis;
  logger: Logger;
  /** Producers, for jobs that enqueue other jobs (batches, reconciler). */
  queues: Record<keyof typeof QUEUE_NAMES, Queue>;
}
