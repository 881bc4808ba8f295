import { logger } from '../../shared/platform/logger.ts';
import { withTimeout } from '../../shared/platform/timeout.ts';
import { sameSecret } from '../http/auth.ts';
import { authenticationFailed, notAuthenticated, notFound } from '../http/errors.ts';
import { defineRoute, type RouteContext } from '../http/routes.ts';
import { guardCredentialCheck } from '../http/throttle.ts';
import { renderGlobalMetrics } from './global-metrics.ts';
import { throttleUsable } from './metrics.ts';
import { healthSchema, readinessSchema } from './schemas.ts';
import { databaseAnswers, pendingMigrations } from '../../shared/platform/db/orm.ts';
import { shippingLag } from '../../shared/events/index.ts';

/**
 * /metrics is served only to the holder of METRICS_TOKEN (sent as Bearer, as Prometheus'
 * `authorization` scrape setting does): the API port may face the internet, and metrics name routes
 * and queue sizes. Without a token configured the routes do not exist (404).
 */
async function requireMetricsToken(ctx: RouteContext): Promise<void> {
  const { metricsToken, redisPrefix, opsAuthFailuresPerMinute, opsAuthFailuresPerHour } = ctx.deps.config;
  if (!metricsToken) throw notFound();
  const match = /^Bearer\s+(\S+)\s*$/i.exec(ctx.get('authorization'));
  if (!match) throw notAuthenticated();
  const guard = {
    prefix: redisPrefix,
    failuresPerMinute: opsAuthFailuresPerMinute,
    failuresPerHour: opsAuthFailuresPerHour,
  };
  // Prometheus keeps no cookies: no proof, counted per address and for the realm (guardCredentialCheck).
  const client = { address: ctx.ip, user: '', proof: null };
  if (!(await guardCredentialCheck(ctx.deps.redis, guard, 'metrics', client, sameSecret(match[1], metricsToken))))
    throw authenticationFailed('Invalid metrics token.');
}

const TEXT_FORMAT = 'text/plain; version=0.0.4; charset=utf-8';
const metricsResponses = {
  200: { description: 'Prometheus text format', contentType: 'text/plain' },
  401: { description: 'Missing or wrong metrics token' },
  404: { description: 'METRICS_TOKEN is not set: metrics are not served' },
  429: { description: 'Too many wrong tokens from this address, or from all clients in the hour' },
};

const CHECK_TIMEOUT_MS = 1500;

type Check = 'ok' | 'unavailable' | 'disabled';

/** Runs a readiness check within the time limit; a failure is logged with its reason, answered without it. */
async function check(name: string, probe: () => Promise<unknown>): Promise<Check> {
  try {
    await withTimeout(probe(), CHECK_TIMEOUT_MS, name);
    return 'ok';
  } catch (error) {
    logger.warn({ check: name, err: (error as Error).message }, 'readiness check failed');
    return 'unavailable';
  }
}

/** What a part being down means, for the readiness body (the error itself goes to the log). */
const CONSEQUENCES: Record<string, string> = {
  postgres: 'PostgreSQL does not answer: requests cannot be served.',
  redis: 'Redis does not answer a command: queues, throttling and credential guards do not work.',
  queues: 'A queue operation failed: jobs cannot be enqueued now (deletion requests wait in PostgreSQL).',
  throttle: 'The rate limiter cannot use Redis: each API process counts requests on its own.',
  auth_cache: 'The auth cache is not listening for auth_changed: it is off, every request reads PostgreSQL.',
  migrations:
    'The database lacks migrations of this version: requests that need their tables or columns fail. Run `npm run migrate`.',
  clickhouse:
    'ClickHouse does not answer: analytics (funnels, lifecycle, cohorts, experiment results) fail. Capture still stores events in PostgreSQL, which ships them once ClickHouse answers again.',
  event_shipping:
    'Events wait longer than EVENT_SHIP_MAX_LAG_SECONDS to reach ClickHouse: analytics miss the newest events (is a worker running?).',
};
/** Without these the API cannot serve requests as it should: 503. The others only degrade it. */
const NEEDED = new Set(['postgres', 'redis', 'queues', 'migrations', 'clickhouse']);
/** Apps whose database had every migration: no migration is ever taken back, so they are not asked again. */
const migrated = new WeakSet<object>();

export const opsRoutes = [
  defineRoute({
    method: 'GET',
    path: '/metrics',
    summary: 'Prometheus metrics of this API process (Bearer METRICS_TOKEN): requests, events ingested, pool, Redis',
    tags: ['ops'],
    scopes: null,
    responses: metricsResponses,
    handler: async (ctx) => {
      await requireMetricsToken(ctx);
      ctx.type = TEXT_FORMAT;
      ctx.body = await ctx.metrics.render(ctx.deps);
    },
  }),
  defineRoute({
    method: 'GET',
    path: '/metrics/global',
    summary: 'Prometheus metrics of the install (Bearer METRICS_TOKEN): queues, deletion requests, workers',
    tags: ['ops'],
    scopes: null,
    responses: metricsResponses,
    handler: async (ctx) => {
      await requireMetricsToken(ctx);
      ctx.type = TEXT_FORMAT;
      ctx.body = await renderGlobalMetrics(ctx.deps, ctx.state.em);
    },
  }),
  defineRoute({
    method: 'GET',
    path: '/_health',
    summary: 'Liveness: the process is up',
    tags: ['ops'],
    scopes: null,
    responses: { 200: { description: 'Up', schema: healthSchema } },
    handler: (ctx) => {
      ctx.body = { status: 'ok' };
    },
  }),
  defineRoute({
    method: 'GET',
    path: '/_ready',
    summary:
      'Readiness: PostgreSQL, Redis and a queue answer and the database is migrated (503 otherwise); throttle and auth cache reported',
    tags: ['ops'],
    scopes: null,
    responses: {
      200: { description: 'Ready', schema: readinessSchema },
      503: { description: 'PostgreSQL or Redis does not answer, or migrations are pending', schema: readinessSchema },
    },
    handler: async (ctx) => {
      const { deps } = ctx;
      const throttle = throttleUsable(deps).then(
        (usable): Check => (usable === null ? 'disabled' : usable ? 'ok' : 'unavailable'),
      );
      const [postgres, redis, queues, throttleCheck, migrations] = await Promise.all([
        check('postgres', () => databaseAnswers(ctx.state.em)),
        check('redis', () => deps.redis.ping()),
        // A BullMQ script on the deletions queue's keys: what enqueueing a request needs.
        check('queues', () => deps.queues.deletions.getJobCounts('wait')),
        throttle,
        check('migrations', async () => {
          if (migrated.has(deps)) return;
          const pending = await pendingMigrations(ctx.state.em);
          if (pending.length) throw new Error(`${pending.length} pending, from ${pending[0]}`);
          migrated.add(deps);
        }),
      ]);
      const authCache: Check = !deps.authCache ? 'disabled' : deps.authCache.active ? 'ok' : 'unavailable';
      const checks: Record<string, Check> = {
        postgres,
        redis,
        queues,
        throttle: throttleCheck,
        auth_cache: authCache,
        migrations,
      };
      let lag: number | undefined;
      if (deps.events.engine === 'clickhouse') {
        [checks.clickhouse, checks.event_shipping] = await Promise.all([
          check('clickhouse', () => deps.events.ping()),
          check('event_shipping', async () => {
            lag = await shippingLag(ctx.state.em);
            if (lag > deps.config.events.shipMaxLagSeconds)
              throw new Error(`oldest unshipped event is ${Math.round(lag)} s old`);
          }),
        ]);
      }
      const down = Object.keys(checks).filter((name) => checks[name] === 'unavailable');
      const ready = !down.some((name) => NEEDED.has(name));
      ctx.status = ready ? 200 : 503;
      ctx.body = {
        status: down.length === 0 ? 'ok' : ready ? 'degraded' : 'unavailable',
        checks,
        ...(down.length > 0 ? { details: Object.fromEntries(down.map((name) => [name, CONSEQUENCES[name]])) } : {}),
        ...(lag === undefined ? {} : { event_shipping_lag_seconds: Math.round(lag) }),
      };
    },
  }),
];
