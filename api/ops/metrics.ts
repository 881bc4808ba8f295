// Prometheus metrics of one API process (GET /metrics): request durations by route, events
// ingested, the database pool, the Redis connection, whether the throttle can use Redis and whether
// the auth cache is listening. Figures read from the shared stores, the same whichever process
// serves them, are on /metrics/global (global-metrics.ts), so that scraping N replicas does not
// count them N times.
import type { Context } from 'koa';
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import { logger } from '../../shared/platform/logger.ts';
import { processRegistry, registerConnectionMetrics } from '../../shared/platform/metrics.ts';
import { withTimeout } from '../../shared/platform/timeout.ts';
import type { AppDeps } from '../deps.ts';
import { enforceThrottle } from '../http/throttle.ts';

export interface ApiMetrics {
  registry: Registry;
  observeRequest: (ctx: Context, ms: number) => void;
  /** Events stored by the capture endpoints. */
  eventsIngested: Counter;
  /** Events capture dropped because their distinct id is suppressed by a deletion request. */
  eventsSuppressed: Counter;
  /** Tracking plan violations capture found, by kind (the JSON Schema keyword, or unplanned_event). */
  planViolations: Counter<'kind'>;
  /** Events capture found violating the tracking plan or matching a drop rule, by what was done (the mode, or drop_rule). */
  planOutcomes: Counter<'outcome'>;
  /** This process's figures in the text format, read now from `deps`. */
  render: (deps: AppDeps) => Promise<string>;
}

const PROBE_TIMEOUT_MS = 1000;
let throttleWasUsable = true;

/**
 * Whether the throttle can use Redis, by running its own commands for a probe key (when Redis refuses
 * them enforceThrottle counts in this process and says so, as it does for a real request). A change
 * is logged once, not at every probe. null: rate limiting is off, so nothing needs Redis.
 */
export async function throttleUsable(deps: AppDeps): Promise<boolean | null> {
  const { rateLimit, redisPrefix } = deps.config;
  if (!rateLimit.enabled) return null;
  const unlimited = Number.MAX_SAFE_INTEGER;
  const settings = { enabled: true, perMinute: unlimited, perHour: unlimited, prefix: redisPrefix };
  const usable = await withTimeout(enforceThrottle(deps.redis, settings, 'ops-probe'), PROBE_TIMEOUT_MS, 'Redis').then(
    (state) => state?.shared === true,
    () => false,
  );
  if (usable !== throttleWasUsable) {
    if (usable) logger.info('throttle can use Redis again: requests are rate limited');
    else logger.warn('throttle cannot use Redis: requests are rate limited per API process only');
  }
  throttleWasUsable = usable;
  return usable;
}

export function createApiMetrics(): ApiMetrics {
  const registry = processRegistry();
  const requests = new Histogram({
    name: 'http_request_duration_seconds',
    help: 'Duration of HTTP requests',
    labelNames: ['method', 'route', 'status'],
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10],
    registers: [registry],
  });
  const eventsIngested = new Counter({
    name: 'events_ingested_total',
    help: "Events stored by this process's capture endpoints",
    registers: [registry],
  });
  const eventsSuppressed = new Counter({
    name: 'events_suppressed_total',
    help: "Events this process's capture endpoints dropped: their distinct id is suppressed by a deletion request",
    registers: [registry],
  });
  const planViolations = new Counter({
    name: 'tracking_plan_violations_total',
    help: "Tracking plan violations this process's capture endpoints found, by kind (JSON Schema keyword, or unplanned_event)",
    labelNames: ['kind'],
    registers: [registry],
  });
  const planOutcomes = new Counter({
    name: 'tracking_plan_events_total',
    help: "Events this process's capture endpoints found violating the tracking plan or matching a drop rule, by outcome (allow, stamp, omit, quarantine, drop, drop_rule)",
    labelNames: ['outcome'],
    registers: [registry],
  });
  // Read at each scrape by render(): the gauges need the process's deps, which the app gets later.
  const authCacheListening = new Gauge({
    name: 'auth_cache_listening',
    help: '1 while the auth cache listens for auth_changed; 0 while it is off and every request reads PostgreSQL',
    registers: [],
  });
  const throttleRedisUsable = new Gauge({
    name: 'throttle_redis_usable',
    help: "1 when the rate limiter's Redis commands succeed; 0 while each API process limits on its own",
    registers: [],
  });
  const requestSeries = new Map<string, ReturnType<typeof requests.labels>>();
  let connected = false;

  return {
    registry,
    // The declared route (not the raw path), so ids do not explode the label set.
    observeRequest: (ctx, ms) => {
      const route: string = ctx.state.routePath ?? 'unmatched';
      // The series of each method, route and status, found once: prom-client hashes a labels object per call.
      const name = `${ctx.method} ${route} ${ctx.status}`;
      let series = requestSeries.get(name);
      if (!series) {
        series = requests.labels({ method: ctx.method, route, status: String(ctx.status) });
        requestSeries.set(name, series);
      }
      series.observe(ms / 1000);
    },
    eventsIngested,
    eventsSuppressed,
    planViolations,
    planOutcomes,
    render: async (deps) => {
      if (!connected) {
        connected = true; // an app has one deps for its life
        registerConnectionMetrics(registry, { orm: deps.orm, redis: deps.redis });
        // Only what this process has: no auth cache configured, no series to page on.
        if (deps.authCache) registry.registerMetric(authCacheListening);
        if (deps.config.rateLimit.enabled) registry.registerMetric(throttleRedisUsable);
      }
      if (deps.authCache) authCacheListening.set(deps.authCache.active ? 1 : 0);
      const usable = await throttleUsable(deps);
      if (usable !== null) throttleRedisUsable.set(usable ? 1 : 0);
      return registry.metrics();
    },
  };
}
