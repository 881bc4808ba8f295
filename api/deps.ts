import type { MikroORM } from '@mikro-orm/postgresql';
import type { Redis } from 'ioredis';
import type { Config } from '../shared/config.ts';

/** What request handlers reach through `ctx.deps`: built once per process in main.ts (or per test). */
export interface AppDeps {
  config: Config;
  orm: MikroORM;
  redis: Redis;
  /** Called after every request with its duration, for metrics. */
  onRequestFinished?: (ctx: import("koa").Context, ms: number) => void;
}
