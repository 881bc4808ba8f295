// All configuration comes from the environment; defaults run everything on this machine.
// envInt/envBool are the one way to read a setting: a malformed value stops the process at start-up.
import { CronExpressionParser } from 'cron-parser';

export function envInt(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value)) throw new Error(`${name} must be an integer, got "${raw}"`);
  return value;
}

export function envBool(name: string, fallback: boolean): boolean {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  return ['1', 'true', 'yes', 'on'].includes(raw.toLowerCase());
}

/** A cron pattern (UTC), checked at start-up: a typo stops the process naming the variable. */
export function envCron(name: string, fallback: string): string {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  try {
    CronExpressionParser.parse(raw, { tz: 'UTC' });
  } catch (error) {
    throw new Error(`${name} must be a cron pattern, got "${raw}": ${(error as Error).message}`);
  }
  return raw;
}

export type Config = ReturnType<typeof loadConfig>;

export function loadConfig() {
  return {
    databaseUrl: process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/analytics',
    /**
     * A connection straight to PostgreSQL, for what needs a session of its own: LISTEN (the auth
     * cache's invalidations), the migration lock, creating the database. Behind a transaction-mode
     * pooler (PgBouncer), DATABASE_URL points at the pooler and this at PostgreSQL.
     */
    databaseDirectUrl: process.env.DATABASE_DIRECT_URL || process.env.DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/analytics',
    redisUrl: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379',
    /** host:port,host:port,… of a Redis Cluster; when set, REDIS_URL is not used. */
    redisClusterNodes: (process.env.REDIS_CLUSTER_NODES ?? '')
      .split(',')
      .map((node) => node.trim())
      .filter(Boolean)
      .map((node) => {
        if (!/^[^:\s]+:\d{1,5}$/.test(node)) throw new Error(`REDIS_CLUSTER_NODES must be host:port,host:port,…, got "${node}"`);
        return node;
      }),
    /** Prefix for every Redis key (queues, throttle counters), so several installs can share a Redis. */
    redisPrefix: process.env.REDIS_PREFIX ?? 'analytics',
    host: process.env.HOST ?? '127.0.0.1',
    port: envInt('PORT', 8000),
    logLevel: process.env.LOG_LEVEL ?? 'info',
    rateLimit: {
      enabled: envBool('RATE_LIMIT_ENABLED', true),
      perMinute: envInt('RATE_LIMIT_PER_MINUTE', 480),
      perHour: envInt('RATE_LIMIT_PER_HOUR', 4800),
    },
    /** How long an API process may reuse an authentication result; changes drop it at once (0: off). */
    authCacheSeconds: envInt('AUTH_CACHE_SECONDS', 60),
    /** JSON request bodies of the management API. */
    maxJsonBodyBytes: envInt('MAX_JSON_BODY_BYTES', 1024 * 1024),
    worker: {
      concurrency: envInt('WORKER_CONCURRENCY', 2),
      shutdownTimeoutMs: envInt('WORKER_SHUTDOWN_TIMEOUT_MS', 30_000),
      /** How long a job stays claimed without renewal; a dead worker's job is taken over after about this long. */
      lockDurationMs: envInt('WORKER_LOCK_DURATION_MS', 30_000),
    },
    /** BullMQ's own retries of a failed job (quick, for passing faults) before the job counts as failed. */
    jobs: {
      attempts: envInt('JOB_ATTEMPTS', 8),
      backoffMs: envInt('JOB_BACKOFF_MS', 5_000),
    },
    deletion: {
      /** When scheduled deletion requests are released (UTC crons). */
      weeklyCron: envCron('DELETION_WEEKLY_CRON', '0 5 * * 0'),
      offPeakCron: envCron('DELETION_OFF_PEAK_CRON', '0 3 * * *'),
      /**
       * How often each worker reconciles PostgreSQL with the queue (a timer in the process, not a
       * Redis-held schedule, so it runs even when Redis lost every scheduler).
       */
      reconcileSeconds: envInt('DELETION_RECONCILE_SECONDS', 60),
      /** A request whose job failed finally is tried again after this delay, doubling per failure up to the maximum. */
      retryFirstDelaySeconds: envInt('DELETION_RETRY_FIRST_DELAY_SECONDS', 900),
      retryMaxDelaySeconds: envInt('DELETION_RETRY_MAX_DELAY_SECONDS', 6 * 3600),
    },
    /** When the other scheduled jobs run (UTC crons). */
    schedules: {
      experimentResultsCron: envCron('EXPERIMENT_RESULTS_CRON', '0 2 * * *'),
      statisticsRefreshCron: envCron('STATISTICS_REFRESH_CRON', '*/5 * * * *'),
      eventPartitionsCron: envCron('EVENT_PARTITIONS_CRON', '0 1 * * *'),
    },
    /** Basic-auth credential for /admin/queues; the dashboard is disabled while unset. */
    adminPassword: process.env.ADMIN_PASSWORD ?? '',
    /** Bearer token Prometheus sends to scrape /metrics; while unset /metrics answers 404. */
    metricsToken: process.env.METRICS_TOKEN ?? '',
    /** Wrong dashboard passwords or metrics tokens one client address may try per minute before 429. */
    opsAuthFailuresPerMinute: envInt('OPS_AUTH_FAILURES_PER_MINUTE', 5),
    /** Check every JSON response against the route's documented schema (tests turn this on). */
    validateResponses: envBool('VALIDATE_RESPONSES', false),
  };
}

export const config = loadConfig();
