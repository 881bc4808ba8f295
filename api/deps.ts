import type { MikroORM } from '@mikro-orm/postgresql';
import type { RedisConnection } from '../shared/platform/redis.ts';
import type { AuthCache } from './http/auth-cache.ts';
import type { KeyWithProject } from '../shared/accounts/index.ts';
import type { FlagCache } from './flags/cache.ts';
import type { SuppressionCache } from './capture/suppression-cache.ts';
import type { ProjectCache } from './capture/project-cache.ts';
import type { PlanCache } from './tracking-plan/cache.ts';
import type { Queues } from '../shared/platform/queues.ts';
import type { Config } from '../shared/platform/config.ts';
import type { EventStore } from '../shared/events/index.ts';

/** What request handlers reach through `ctx.deps`: built once per process in main.ts (or per test). */
export interface AppDeps {
  config: Config;
  orm: MikroORM;
  /** Where events are analysed (EVENT_STORE). */
  events: EventStore;
  redis: RedisConnection;
  /** Producers of the worker's queues (enqueue only; the API never processes jobs). */
  queues: Queues;
  /** Authentication results cached until a change notifies `auth_changed`; null: every request reads PostgreSQL. */
  authCache?: AuthCache<KeyWithProject> | null;
  /** The time in epoch milliseconds, for the throttle's windows (tests fix it; Date.now otherwise). */
  clock?: () => number;
  /** Flag definitions per project token until they change (`flag_definitions_changed`); null: read on every request. */
  flagCache?: FlagCache | null;
  /** Deletion suppressions per project until they change (`deletion_suppression_changed`); null: capture reads PostgreSQL. */
  suppressionCache?: SuppressionCache | null;
  /** Capture's project per API token until it changes (`flag_definitions_changed`); null: read on every request. */
  projectCache?: ProjectCache | null;
  /** Tracking plans per project, compiled, until a new version (`tracking_plan_changed`); null: capture reads PostgreSQL. */
  planCache?: PlanCache | null;
}
