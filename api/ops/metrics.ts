// Prometheus metrics of the API: request durations by route, queue job counts per state (the same
// for every process, read from Redis), and deletion requests by status (read from PostgreSQL).
import type { Context } from 'koa';
import { Histogram, Registry, collectDefaultMetrics } from 'prom-client';

export interface ApiMetrics {
  registry: Registry;
  observeRequest: (ctx: Context, ms: number) => void;
}

export function createApiMetrics(): ApiMetrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  const requests = new Histogram({
    name: 'http_request_duration_seconds',
    help: 'Duration of HTTP requests',
    labelNames: ['method', 'route', 'status'],
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10],
    registers: [registry],
  });
  return {
    registry,
    // The declared route (not the raw path), so ids do not explode the label set.
    observeRequest: (ctx, ms) => requests.observe({ method: ctx.method, route: (ctx as any)._matchedRoute ?? 'unmatched', status: String(ctx.status) }, ms / 1000),
  };
}
