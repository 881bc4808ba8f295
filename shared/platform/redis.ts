// The one place Redis connections are made: a single node (REDIS_URL) or a Redis Cluster
// (REDIS_CLUSTER_NODES). Every key the service writes is cluster-safe: queues live under a
// hash-tagged prefix (shared/queues.ts), the throttle's keys share a hash tag per API key.
import { Cluster, Redis, type ClusterOptions, type RedisOptions } from 'ioredis';
import { config } from './config.ts';

export type RedisConnection = Redis | Cluster;

interface Target {
  url: string;
  /** host:port of cluster nodes; empty: a single node at `url`. */
  clusterNodes: string[];
}

const defaultTarget = (): Target => ({ url: config.redisUrl, clusterNodes: config.redisClusterNodes });

function connect(target: Target, options: RedisOptions): RedisConnection {
  if (target.clusterNodes.length === 0) return new Redis(target.url, options);
  const nodes = target.clusterNodes.map((node) => {
    const [host, port] = node.split(':');
    return { host, port: Number(port) };
  });
  const clusterOptions: ClusterOptions = {
    redisOptions: options,
    enableOfflineQueue: options.enableOfflineQueue,
    clusterRetryStrategy: options.retryStrategy,
    // A cluster redirects commands (MOVED/ASK); keep those retries short for the fail-fast client.
    retryDelayOnFailover: 100,
  };
  return new Cluster(nodes, clusterOptions);
}

/**
 * The API's connection fails fast: a request must not hang while Redis is away
 * (throttling fails open, deletion requests stay in PostgreSQL for the reconciler).
 */
export function createApiRedis(target: Target = defaultTarget()): RedisConnection {
  return connect(target, {
    maxRetriesPerRequest: 1,
    enableOfflineQueue: false,
    connectTimeout: 2000,
    lazyConnect: false,
    retryStrategy: (times) => Math.min(times * 200, 2000),
  });
}

/** BullMQ workers need blocking commands to wait forever: maxRetriesPerRequest must be null. */
export function createWorkerRedis(target: Target = defaultTarget()): RedisConnection {
  return connect(target, { maxRetriesPerRequest: null, retryStrategy: (times) => Math.min(times * 500, 5000) });
}
