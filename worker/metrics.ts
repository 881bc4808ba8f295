// Prometheus metrics of one worker process: job durations by queue, job and outcome, served on
// WORKER_METRICS_PORT when set (each worker process needs its own port). Queue depths are served
// by the API's /metrics, since they are the same for every worker.
import { createServer, type Server } from 'node:http';
import { collectDefaultMetrics, Histogram, Registry } from 'prom-client';
import type { WorkerDeps } from './deps.ts';
import { config } from '../shared/config.ts';

export function startWorkerMetrics(deps: Pick<WorkerDeps, 'logger'>, port = config.worker.metricsPort) {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  const durations = new Histogram({
    name: 'worker_job_duration_seconds',
    help: 'Duration of processed jobs',
    labelNames: ['queue', 'job', 'outcome'],
    buckets: [0.05, 0.25, 1, 5, 30, 120, 600, 3600],
    registers: [registry],
  });
  let server: Server | null = null;
  if (port > 0) {
    server = createServer(async (req, res) => {
      if (req.url !== '/metrics') {
        res.writeHead(404).end();
        return;
      }
      res.writeHead(200, { 'content-type': registry.contentType }).end(await registry.metrics());
    }).listen(port, '0.0.0.0', () => deps.logger.info({ port }, 'worker metrics listening'));
  }
  return {
    port: port > 0 ? port : null,
    registry,
    observe: (queue: string, job: string, ms: number, ok: boolean) => durations.observe({ queue, job, outcome: ok ? 'completed' : 'failed' }, ms / 1000),
    close: () => new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve())),
  };
}
