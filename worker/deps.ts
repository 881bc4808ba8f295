import type { MikroORM } from '@mikro-orm/postgresql';
import type { RedisConnection } from '../shared/platform/redis.ts';
import type { Config } from '../shared/platform/config.ts';
import type { Logger } from '../shared/platform/logger.ts';
import type { Queues } from '../shared/platform/queues.ts';
import type { EventStore } from '../shared/events/index.ts';

export interface WorkerDeps {
  config: Config;
  orm: MikroORM;
  /** Where events are analysed and deleted (EVENT_STORE). */
  events: EventStore;
  connection: RedisConnection;
  logger: Logger;
  /** Producers, for jobs that enqueue other jobs (batches, reconciler). */
  queues: Queues;
}
