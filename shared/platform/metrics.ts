// Metrics both processes keep: the per-process registry (Node's default figures, the database pool,
// the Redis connection), and the worker snapshots that workers push into Redis so that the API can
// serve every worker's figures without each worker needing a port of its own.
import type { MikroORM } from '@mikro-orm/postgresql';
import { collectDefaultMetrics, Gauge, Registry } from 'prom-client';
import type { RedisConnection } from './redis.ts';

/**
 * A registry with Node's default metrics, less the three gauges prom-client names `_total`
 * (nodejs_active_{handles,requests,resources}_total): `promtool check metrics` rejects a gauge with
 * that suffix, and the same figures are kept by type in nodejs_active_{handles,requests,resources}.
 */
export function processRegistry(): Registry {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  for (const name of ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total'])
    registry.removeSingleMetric(name);
  return registry;
}

/** This process's PostgreSQL pool and Redis connection, read at each scrape. */
export function registerConnectionMetrics(
  registry: Registry,
  sources: { orm: MikroORM; redis: RedisConnection },
): void {
  // MikroORM 7 runs `pg` through Kysely; the pool is pg's own.
  const pool = async () => sources.orm.em.getConnection().getNativeClient();
  const poolGauge = (name: string, help: string, read: (p: Awaited<ReturnType<typeof pool>>) => number) =>
    new Gauge({
      name,
      help,
      registers: [registry],
      async collect() {
        this.set(read(await pool()));
      },
    });
  poolGauge(
    'db_pool_connections_in_use',
    "PostgreSQL connections checked out of this process's pool",
    (p) => p.totalCount - p.idleCount,
  );
  poolGauge('db_pool_connections_idle', "PostgreSQL connections idle in this process's pool", (p) => p.idleCount);
  poolGauge('db_pool_waiting_requests', 'Queries of this process waiting for a pool connection', (p) => p.waitingCount);
  poolGauge(
    'db_pool_connections_max',
    "Size limit of this process's pool (DATABASE_POOL_MAX)",
    (p) => p.options.max ?? 10,
  );
  new Gauge({
    name: 'redis_connection_up',
    help: "1 while this process's Redis connection is ready for commands, 0 while it is down or reconnecting",
    registers: [registry],
    collect() {
      this.set(sources.redis.status === 'ready' ? 1 : 0);
    },
  });
}

// ---- Worker snapshots in Redis -------------------------------------------------------------------

/**
 * One hash per install: field = worker id, value = {expiresAt, text}. Hash-tagged with the prefix, as
 * the queues are, so it is one key on a Redis Cluster too.
 */
export const workerMetricsKey = (prefix: string) => `{${prefix}}:worker-metrics`;

/** Stores this worker's exposition, valid until `expiresAt` (ms); a worker that stops pushing drops out. */
export async function pushWorkerMetrics(
  redis: RedisConnection,
  prefix: string,
  workerId: string,
  text: string,
  expiresAt: number,
): Promise<void> {
  await redis.hset(workerMetricsKey(prefix), workerId, JSON.stringify({ expiresAt, text }));
}

export async function removeWorkerMetrics(redis: RedisConnection, prefix: string, workerId: string) {
  await redis.hdel(workerMetricsKey(prefix), workerId);
}

/** The live workers' expositions, by worker id; expired snapshots are deleted as they are found. */
export async function readWorkerMetrics(
  redis: RedisConnection,
  prefix: string,
  now = Date.now(),
): Promise<Map<string, string>> {
  const all = await redis.hgetall(workerMetricsKey(prefix));
  const live = new Map<string, string>();
  const expired: string[] = [];
  for (const [id, raw] of Object.entries(all)) {
    let entry: { expiresAt?: unknown; text?: unknown } | null = null;
    try {
      entry = JSON.parse(raw);
    } catch {
      // A value no worker of ours wrote: drop it like an expired one.
    }
    if (entry && typeof entry.expiresAt === 'number' && entry.expiresAt > now && typeof entry.text === 'string')
      live.set(id, entry.text);
    else expired.push(id);
  }
  if (expired.length > 0) await redis.hdel(workerMetricsKey(prefix), ...expired);
  return live;
}

/**
 * Merges expositions into one: the text format wants each metric's HELP and TYPE once and all of its
 * samples together, so the samples of every input are grouped under their metric family. The inputs'
 * samples must be told apart by a label (workers carry `worker`), or the output repeats a series.
 */
export function mergeExpositions(texts: string[]): string {
  const families = new Map<string, { help: string; type: string; samples: string[] }>();
  for (const text of texts) {
    let current: { help: string; type: string; samples: string[] } | undefined;
    for (const line of text.split('\n')) {
      const described = /^# (HELP|TYPE) ([a-zA-Z_:][a-zA-Z0-9_:]*)(?: (.*))?$/.exec(line);
      if (described) {
        const [, kind, name] = described;
        current = families.get(name) ?? { help: '', type: '', samples: [] };
        families.set(name, current);
        if (kind === 'HELP') current.help ||= line;
        else current.type ||= line;
      } else if (line && !line.startsWith('#') && current) {
        current.samples.push(line);
      }
    }
  }
  return [...families.values()].map((f) => [f.help, f.type, ...f.samples].filter(Boolean).join('\n')).join('\n');
}
