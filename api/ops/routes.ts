import { defineRoute } from '../http/routes.ts';

export const opsRoutes = [
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
      const withTimeout = <T>(promise: Promise<T>) =>
        Promise.race([promise, new Promise<never>((_, reject) => setTimeout(() => reject(new Error('timeout')), 1500))]);
      const [postgres, redis] = await Promise.allSettled([
        withTimeout(ctx.state.em.getConnection().execute('select 1')),
        withTimeout(ctx.deps.redis.ping()),
      ]);
      const checks = { postgres: postgres.status === 'fulfilled' ? 'ok' : 'unavailable', redis: redis.status === 'fulfilled' ? 'ok' : 'unavailable' };
      const ready = Object.values(checks).every((v) => v === 'ok');
      ctx.status = ready ? 200 : 503;
      ctx.body = { status: ready ? 'ok' : 'unavailable', checks };
    },
  }),
];
