// What both processes hand to the features, as one contract: built once per process (worker/main.ts;
// the API's AppDeps holds the same parts and its caches). A feature that needs the event store takes
// `Deps & EventStoreDeps` (shared/events): its contract is that feature's, apart from both engines.
import type { MikroORM } from '@mikro-orm/postgresql';
import type { Config } from './config.ts';
import type { Logger } from './logger.ts';
import type { Queues } from './queues.ts';
import type { RedisConnection } from './redis.ts';

export interface Deps {
  config: Config;
  orm: MikroORM;
  logger: Logger;
  /** Producers, for jobs that enqueue other jobs (batches, the reconciler, webhooks). */
  queues: Queues;
  /** This process's Redis connection (the worker's waits for Redis; the API's fails fast). */
  connection: RedisConnection;
}
