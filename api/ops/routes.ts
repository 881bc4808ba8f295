import { withTimeout } from '../../shared/timeout.ts';
import { defineRoute } from '../http/routes.ts';

export const opsRoutes = [
  defineRoute({
    method: 'GET',
    path: '/metrics',
    summary: 'Prometheus metrics: HTTP durations, queue job counts per state, deletion requests by status',
    tags: ['ops'],
    scopes: null,
    responses: { 200: { description: 'Prometheus text format', contentType: 'text/plain' } },
    handler: async (ctx) => {
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
