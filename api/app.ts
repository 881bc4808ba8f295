// The Koa application, built without listening so tests can drive it on any port.
// Request path: request id + log → errors → path normalisation → SDK CORS → routes → 404/405/OPTIONS.
import Koa from 'koa';
import type { Server } from 'node:http';
import { randomUUID } from 'node:crypto';
import { logger } from '../shared/platform/logger.ts';
import type { AppDeps } from './deps.ts';
import { ApiError, methodNotAllowed, notFound } from './http/errors.ts';
import { allowedMethods, mountRoutes, type RouteDefinition } from './http/routes.ts';
import { allRoutes } from './routes.ts';
import { clientAddress } from './http/client-address.ts';
import { sdkCorsOnEveryAnswer } from './capture/routes.ts';
import { queueDashboard } from './ops/admin.ts';
import { createApiMetrics, type ApiMetrics } from './ops/metrics.ts';

declare module 'koa' {
  interface DefaultContext {
    deps: AppDeps;
    metrics: ApiMetrics;
  }
}

/**
 * Trailing slash optional everywhere; /api/environments/:id/… is an alias of /api/projects/:id/…. Done in the
 * first middleware rather than one of its own: every request passes here, and each layer costs a turn.
 */
function normalisePath(ctx: Koa.Context): void {
  const requested = ctx.path;
  ctx.state.requestPath = requested;
  let path = requested;
  if (path.length > 1 && path.endsWith('/')) path = path.replace(/\/+$/, '');
  if (path.startsWith('/api/environments/')) path = `/api/projects/${path.slice('/api/environments/'.length)}`;
  if (path !== requested) ctx.path = path;
}

/** A client's own X-Request-Id is kept when it is a token of visible ASCII this long at most; else a fresh one. */
const CLIENT_REQUEST_ID = /^[\x21-\x7e]{1,200}$/;

export function createApp(deps: AppDeps, routes: RouteDefinition[] = allRoutes) {
  const trustedHops = deps.config.trustProxy;
  // Koa's proxy setting also makes X-Forwarded-Proto/-Host count for absolute URLs; the client
  // address is set below (Koa would read the leftmost X-Forwarded-For entry, which the client writes).
  const app = new Koa({ proxy: trustedHops > 0, maxIpsCount: trustedHops });
  app.context.deps = deps;
  const metrics = createApiMetrics();
  app.context.metrics = metrics;
  const router = mountRoutes(routes);

  app.use(async (ctx, next) => {
    const started = process.hrtime.bigint();
    ctx.request.ip = clientAddress(ctx.get('x-forwarded-for'), ctx.req.socket.remoteAddress, trustedHops);
    const given = ctx.get('x-request-id');
    const requestId = CLIENT_REQUEST_ID.test(given) ? given : randomUUID();
    ctx.state.requestId = requestId;
    ctx.set('X-Request-Id', requestId);
    try {
      normalisePath(ctx);
      await next();
    } catch (error) {
      if (error instanceof ApiError) {
        ctx.status = error.status;
        ctx.set(error.headers);
        ctx.body = error.body;
      } else {
        logger.error({ err: error, requestId, method: ctx.method, path: ctx.path }, 'unhandled error');
        ctx.status = 500;
        ctx.body = { type: 'server_error', code: 'error', detail: 'A server error occurred.', attr: null };
      }
    } finally {
      const ms = Number(process.hrtime.bigint() - started) / 1e6;
      logger.info({ requestId, method: ctx.method, path: ctx.path, status: ctx.status, ms }, 'request');
      metrics.observeRequest(ctx, ms);
    }
  });

  app.use(sdkCorsOnEveryAnswer);

  const dashboard = queueDashboard(deps);
  if (dashboard) app.use(dashboard);
  app.use(router.routes());
  // Nothing answered: OPTIONS on a routed path is 204 with Allow (an SDK path's preflight is a route of its
  // own), another method on it 405 with Allow, and a path routed for no method 404.
  app.use(async (ctx) => {
    if (ctx.body !== undefined || ctx.status !== 404) return;
    const allowed = allowedMethods(ctx);
    if (allowed.length === 0) throw notFound();
    if (ctx.method !== 'OPTIONS') throw methodNotAllowed(ctx.method, allowed);
    ctx.set('Allow', allowed.join(', '));
    ctx.status = 204;
  });

  app.on('error', (error) => logger.debug({ err: error }, 'koa error'));
  return app;
}

/**
 * Listens with PostHog's error body even for requests Node rejects before Koa sees them
 * (headers or URL too large: 431, unparseable request: 400).
 */
export function listen(app: Koa, port: number, host: string, onListening?: () => void): Server {
  const server = app.listen(port, host, onListening);
  server.on('clientError', (error: NodeJS.ErrnoException, socket) => {
    if (!socket.writable) return socket.destroy();
    const tooLarge = error.code === 'HPE_HEADER_OVERFLOW';
    const status = tooLarge ? 431 : 400;
    const body = JSON.stringify({
      type: 'invalid_request',
      code: tooLarge ? 'request_header_fields_too_large' : 'bad_request',
      detail: tooLarge ? 'Request URL or headers are too large.' : 'Malformed HTTP request.',
      attr: null,
    });
    socket.end(
      `HTTP/1.1 ${status} ${tooLarge ? 'Request Header Fields Too Large' : 'Bad Request'}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
    );
  });
  return server;
}
