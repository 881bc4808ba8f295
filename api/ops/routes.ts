import { withTimeout } from '../../shared/timeout.ts';
import { sameSecret } from '../http/auth.ts';
import { authenticationFailed, notAuthenticated, notFound } from '../http/errors.ts';
import { defineRoute, type ApiContext } from '../http/routes.ts';
import { guardCredentialCheck } from '../http/throttle.ts';
import { healthSchema, readinessSchema } from './schemas.ts';

/**
 * /metrics is served only to the holder of METRICS_TOKEN (sent as Bearer, as Prometheus'
 * `authorization` scrape setting does): the API port may face the internet, and metrics name routes
 * and queue sizes. Without a token configured the route does not exist (404).
 */
async function requireMetricsToken(ctx: ApiContext): Promise<void> {
  const { metricsToken, redisPrefix, opsAuthFailuresPerMinute } = ctx.deps.config;
  if (!metricsToken) throw notFound();
  const match = /^Bearer\s+(\S+)\s*$/i.exec(ctx.get('authorization'));
  if (!match) throw notAuthenticated();
  const guard = { prefix: redisPrefix, failuresPerMinute: opsAuthFailuresPerMinute };
  if (!(await guardCredentialCheck(ctx.deps.redis, guard, 'metrics', ctx.ip, sameSecret(match[1], metricsToken))))
    throw authenticationFailed('Invalid metrics token.');
}

export const opsRoutes = [
  defineRoute({
    method: 'GET',
    path: '/metrics',
    summary: 'Prometheus metrics (Bearer METRICS_TOKEN): HTTP durations, queue job counts, deletion requests by status',
    tags: ['ops'],
    scopes: null,
    responses: {
      200: { description: 'Prometheus text format', contentType: 'text/plain' },
      401: { description: 'Missing or wrong metrics token' },
      404: { description: 'METRICS_TOKEN is not set: metrics are not served' },
      429: { description: 'Too many wrong tokens from this address' },
    },
    handler: async (ctx) => {
      await requireMetricsToken(ctx);
      const parts = [await ctx.metrics.registry.metrics()];
      // Each queue's export repeats # HELP / # TYPE; Prometheus accepts them once per metric.
      const described = new Set<string>();
      for (const queue of Object.values(ctx.deps.queues)) {
        const text = await queue.exportPrometheusMetrics().catch(() => `# queue ${queue.name}: Redis unavailable`);
        parts.push(text.split('\n').filter((line) => !/^# (HELP|TYPE) /.test(line) || (!described.has(line) && described.add(line))).join('\n'));
      }
      const rows = await ctx.state.em
        .getConnection()
        .execute<{ status: string; n: number }[]>(`select status, count(*)::int as n from async_deletion group by status`);
      const counts = new Map(rows.map((r) => [r.status, r.n]));
      parts.push(
        '# HELP deletion_requests Deletion requests by status\n# TYPE deletion_requests gauge\n' +
          ['pending', 'running', 'completed', 'failed'].map((s) => `deletion_requests{status="${s}"} ${counts.get(s) ?? 0}`).join('\n'),
      );
      ctx.type = 'text/plain; version=0.0.4';
      ctx.body = parts.join('\n') + '\n';
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
    summary: 'Readiness: PostgreSQL and Redis answer',
    tags: ['ops'],
    scopes: null,
    responses: {
      200: { description: 'Ready', schema: readinessSchema },
      503: { description: 'PostgreSQL or Redis does not answer', schema: readinessSchema },
    },
    handler: async (ctx) => {
      const [postgres, redis] = await Promise.allSettled([
        withTimeout(ctx.state.em.getConnection().execute('select 1'), 1500, 'PostgreSQL'),
        withTimeout(ctx.deps.redis.ping(), 1500, 'Redis'),
      ]);
      const checks = { postgres: postgres.status === 'fulfilled' ? 'ok' : 'unavailable', redis: redis.status === 'fulfilled' ? 'ok' : 'unavailable' };
      const ready = Object.values(checks).every((v) => v === 'ok');
      ctx.status = ready ? 200 : 503;
      ctx.body = { status: ready ? 'ok' : 'unavailable', checks };
    },
  }),
];
