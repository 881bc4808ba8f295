// Worker metrics that tell the truth: BullMQ's completed/failed totals count the jobs the workers
// ran, and every worker process's own figures reach Prometheus (through Redis and the API's
// /metrics/global) without a port of its own, however many run on one machine.
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pushWorkerMetrics, readWorkerMetrics, workerMetricsKey } from '../../shared/platform/metrics.ts';
import { logger } from '../../shared/platform/logger.ts';
import { startWorkerMetrics } from '../../worker/metrics.ts';
import { eventually, settledJob, startApi, startTestWorker, uniqueRedisPrefix, type TestApi } from '../helpers.ts';
import { matching, metricValue, promtool, scrape } from '../api/ops/exposition.ts';
import { missingPackage } from '../packages.ts';
import { freePort } from '../services.ts';

const root = fileURLToPath(new URL('../..', import.meta.url));
const TOKEN = 'worker-metrics-token';
const prefix = uniqueRedisPrefix();
let api: TestApi;
const children: ChildProcess[] = [];

beforeAll(async () => {
  api = await startApi((config) => {
    config.redisPrefix = prefix;
    config.metricsToken = TOKEN;
  });
});
afterAll(async () => {
  for (const child of children) child.kill('SIGKILL');
  await api.close();
});

const global = async () => {
  const res = await scrape(api.baseUrl, TOKEN, '/metrics/global');
  expect(res.status).toBe(200);
  return res.text;
};

describe('BullMQ job totals', () => {
  it('count the jobs workers completed and those that failed for the last time, once each', async () => {
    const worker = await startTestWorker(prefix);
    try {
      const { maintenance, experimentResults } = api.deps.queues;
      const partitions = (monthsAhead: number, attempts = 1) =>
        maintenance.add('ensure-event-partitions', { monthsAhead }, { attempts });
      const completed = await Promise.all(Array.from({ length: 5 }, () => partitions(0)));
      // Refused at once (UnrecoverableError), whatever attempts remain.
      const refused = await Promise.all(Array.from({ length: 2 }, () => partitions(-1, 3)));
      // Fails twice (a database error), so it is retried once, then counts as one failure.
      const retried = await experimentResults.add(
        'compute',
        { experimentId: 'not-a-number' },
        { attempts: 2, backoff: { type: 'fixed', delay: 10 } },
      );
      for (const job of [...completed, ...refused]) await settledJob(maintenance, job);
      const settled = await settledJob(experimentResults, retried);
      expect(settled.attemptsMade).toBe(2);

      const text = await global();
      expect(metricValue(text, 'bullmq_job_completed_total', { queue: 'maintenance' })).toBe(5);
      expect(metricValue(text, 'bullmq_job_failed_total', { queue: 'maintenance' })).toBe(2);
      expect(metricValue(text, 'bullmq_job_failed_total', { queue: 'experiment-results' })).toBe(1);
      expect(metricValue(text, 'bullmq_job_completed_total', { queue: 'experiment-results' })).toBe(0);
      expect(metricValue(text, 'bullmq_jobs', { queue: 'maintenance', state: 'completed' })).toBe(5);
    } finally {
      await worker.close();
    }
  });
});

function startWorkerProcess(env: Record<string, string> = {}): ChildProcess {
  const child = spawn(process.execPath, ['worker/main.ts'], {
    cwd: root,
    env: { ...process.env, REDIS_PREFIX: prefix, LOG_LEVEL: 'silent', WORKER_METRICS_PUSH_SECONDS: '3', ...env },
    stdio: 'ignore',
  });
  children.push(child);
  return child;
}

describe('worker process metrics', () => {
  it.skipIf(missingPackage('promtool'))(
    'reach /metrics/global from every worker by default, one series per worker, gone when it stops',
    async () => {
      delete process.env.WORKER_METRICS_PORT;
      const first = startWorkerProcess();
      const second = startWorkerProcess();
      const label = (child: ChildProcess) => ({ worker: expect.stringMatching(new RegExp(`:${child.pid}$`)) });
      // (Absent until the API's own Redis connection is up: metrics_source_up says so meanwhile.)
      await eventually(async () => matching(await global(), 'workers_reporting')[0]?.value === 2, 60_000);

      const jobs = await Promise.all(
        Array.from({ length: 6 }, () => api.deps.queues.maintenance.add('ensure-event-partitions', { monthsAhead: 0 })),
      );
      for (const job of jobs) await settledJob(api.deps.queues.maintenance, job);
      const job = { queue: 'maintenance', job: 'ensure-event-partitions', outcome: 'completed' };
      const done = (text: string) =>
        matching(text, 'worker_job_duration_seconds_count', job).reduce((sum, s) => sum + s.value, 0);
      const text = await eventually(async () => {
        const current = await global();
        return done(current) === 6 ? current : null;
      }, 15_000);
      // Both workers report their own process figures under their own label, side by side.
      const resident = matching(text, 'process_resident_memory_bytes');
      expect(resident).toHaveLength(2);
      expect(resident.map((s) => s.labels)).toEqual(expect.arrayContaining([label(first), label(second)]));
      expect(matching(text, 'redis_connection_up').map((s) => s.value)).toEqual([1, 1]);
      expect(matching(text, 'db_pool_connections_max')).toHaveLength(2);
      expect(promtool(text)).toEqual({ status: 0, output: '' });

      // A worker that shuts down takes its entry with it (not only once it expires, 12 s later).
      first.kill('SIGTERM');
      await new Promise((r) => first.once('exit', r));
      const after = await global();
      expect(metricValue(after, 'workers_reporting')).toBe(1);
      expect(matching(after, 'process_resident_memory_bytes').map((s) => s.labels)).toEqual([label(second)]);
    },
    90_000,
  );

  it('drops a worker that stopped pushing once its figures expire', async () => {
    const text = (worker: string) => `# HELP x x\n# TYPE x gauge\nx{worker="${worker}"} 1\n`;
    await pushWorkerMetrics(api.redis, prefix, 'gone:1', text('gone:1'), Date.now() - 1);
    await pushWorkerMetrics(api.redis, prefix, 'here:2', text('here:2'), Date.now() + 60_000);
    try {
      expect([...(await readWorkerMetrics(api.redis, prefix)).keys()]).toContain('here:2');
      const left = await api.redis.hkeys(workerMetricsKey(prefix));
      expect(left).toContain('here:2');
      expect(left).not.toContain('gone:1');
    } finally {
      await api.redis.hdel(workerMetricsKey(prefix), 'here:2');
    }
  });

  it('serves HTTP on WORKER_METRICS_PORT at 127.0.0.1 by default; a taken port costs only the server', async () => {
    const worker = await startTestWorker(uniqueRedisPrefix());
    const port = await freePort();
    const errors: unknown[] = [];
    const log = Object.assign(Object.create(logger), { error: (...args: unknown[]) => errors.push(args) });
    const one = startWorkerMetrics({ ...worker.deps, logger: log }, { port, workerId: 'http-one' });
    const two = startWorkerMetrics({ ...worker.deps, logger: log }, { port, workerId: 'http-two' });
    try {
      await eventually(async () => one.address());
      expect(one.address()).toMatchObject({ address: '127.0.0.1', port });
      const res = await fetch(`http://127.0.0.1:${port}/metrics`);
      expect(await res.text()).toContain('worker_job_duration_seconds');
      await eventually(async () => errors.length > 0);
      expect(two.address()).toBeNull();
      // The second still pushes its figures into Redis; closing removes both entries.
      const pushed = () => readWorkerMetrics(worker.deps.connection, worker.deps.config.redisPrefix);
      await eventually(async () => (await pushed()).size === 2);
      expect([...(await pushed()).keys()].sort()).toEqual(['http-one', 'http-two']);
      await one.close();
      await two.close();
      expect((await pushed()).size).toBe(0);
    } finally {
      await one.close();
      await two.close();
      await worker.close();
    }
  });
});
