// All configuration comes from the environment; defaults run everything on this machine.
// envInt/envBool are the one way to read a setting: a malformed value stops the process at start-up.
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

export type Config = ReturnType<typeof loadConfig>;

export function loadConfig() {
  return {
    databaseUrl: process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/analytics',
    redisUrl: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379',
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
