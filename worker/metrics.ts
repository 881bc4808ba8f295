// Prometheus metrics of one worker process: job durations by queue, job and outcome, Node's figures,
// the database pool and the Redis connection, all labelled with the worker's id (host:pid).
//
// Every worker pushes them into Redis every WORKER_METRICS_PUSH_SECONDS, and the API serves all live
// workers' figures on /metrics/global: workers get metrics with no port to open, find or keep apart
// (several workers on one machine, `docker compose --scale worker=3`), and Prometheus scrapes only the
// API. A worker that stops pushing drops out after a few intervals; one that shuts down removes its
// entry at once. WORKER_METRICS_PORT additionally serves the same text over HTTP, on
// WORKER_METRICS_HOST (127.0.0.1 unless configured), for a scraper on the worker's own machine.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { hostname } from 'node:os';
import { Histogram, type Registry } from 'prom-client';
import type { WorkerDeps } from './deps.ts';
import {
  processRegistry,
  pushWorkerMetrics,
  registerConnectionMetrics,
  removeWorkerMetrics,
} from '../shared/platform/metrics.ts';
import { withTimeout } from '../shared/platform/timeout.ts';

export interface WorkerMetricsOptions {
  /** 0: no HTTP server (the default). */
  port?: number;
  host?: string;
  pushSeconds?: number;
  workerId?: string;
}

export interface WorkerMetrics {
  workerId: string;
  registry: Registry;
  /** Where the HTTP server listens, or null. */
  address: () => AddressInfo | null;
  observe: (queue: string, job: string, ms: number, ok: boolean) => void;
  /** Pushes the current figures into Redis now. */
  push: () => Promise<void>;
  close: () => Promise<void>;
}

export function startWorkerMetrics(
  deps: Pick<WorkerDeps, 'logger' | 'connection' | 'orm' | 'config'>,
  options: WorkerMetricsOptions = {},
): WorkerMetrics {
  const port = options.port ?? deps.config.worker.metricsPort;
  const host = options.host ?? deps.config.worker.metricsHost;
  const pushSeconds = options.pushSeconds ?? deps.config.worker.metricsPushSeconds;
  const workerId = options.workerId ?? `${hostname()}:${process.pid}`;
  const prefix = deps.config.redisPrefix;

  const registry = processRegistry();
  registry.setDefaultLabels({ worker: workerId });
  registerConnectionMetrics(registry, { orm: deps.orm, redis: deps.connection });
  const durations = new Histogram({
    name: 'worker_job_duration_seconds',
    help: 'Duration of job attempts run by this worker, by outcome (a retried attempt counts as failed)',
    labelNames: ['queue', 'job', 'outcome'],
    buckets: [0.05, 0.25, 1, 5, 30, 120, 600, 3600],
    registers: [registry],
  });

  let pushFailing = false;
  let closed = false;
  let inFlight: Promise<void> = Promise.resolve();
  const pushNow = async () => {
    if (closed) return;
    try {
      // Valid for a few intervals, so one slow push does not make the worker vanish.
      const expiresAt = Date.now() + 4 * pushSeconds * 1000;
      await pushWorkerMetrics(deps.connection, prefix, workerId, await registry.metrics(), expiresAt);
      if (pushFailing) deps.logger.info('worker metrics pushed to Redis again');
      pushFailing = false;
    } catch (error) {
      if (!pushFailing) deps.logger.warn({ err: (error as Error).message }, 'worker metrics not pushed to Redis');
      pushFailing = true;
    }
  };
  // One push at a time; close() waits for it, so a late push cannot bring a closed worker's entry back.
  const push = () => (inFlight = inFlight.then(pushNow));
  // The first figures once Redis is connected, so they do not show the connection still coming up.
  if (deps.connection.status === 'ready') void push();
  else deps.connection.once('ready', () => void push());
  const timer = setInterval(() => void push(), pushSeconds * 1000);
  timer.unref();

  let server: Server | null = null;
  if (port > 0) {
    server = createServer(async (req, res) => {
      if (req.url !== '/metrics') {
        res.writeHead(404).end();
        return;
      }
      res.writeHead(200, { 'content-type': registry.contentType }).end(await registry.metrics());
    });
    // A port already taken (say, a second worker given the same one) costs the HTTP server, not the worker.
    server.on('error', (error) => {
      deps.logger.error({ port, host, err: error.message }, 'worker metrics server failed; metrics still go to Redis');
      server = null;
    });
    server.listen(port, host, () => deps.logger.info({ port, host }, 'worker metrics listening'));
  }

  return {
    workerId,
    registry,
    address: () => {
      const address = server?.address();
      return address && typeof address === 'object' ? address : null;
    },
    observe: (queue, job, ms, ok) => durations.observe({ queue, job, outcome: ok ? 'completed' : 'failed' }, ms / 1000),
    push,
    close: async () => {
      clearInterval(timer);
      closed = true;
      // Without Redis neither the last push nor the removal ever answers: the entry then expires by itself.
      await withTimeout(
        inFlight.then(() => removeWorkerMetrics(deps.connection, prefix, workerId)),
        1000,
        'worker metrics removal',
      ).catch(() => undefined);
      const open = server;
      server = null;
      if (open?.listening) await new Promise<void>((resolve) => open.close(() => resolve()));
    },
  };
}
