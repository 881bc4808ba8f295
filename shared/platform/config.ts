// All configuration comes from the environment, read here and nowhere else, through one JSON schema
// (SETTINGS_SCHEMA, validated with ajv): a malformed value stops the process at start-up naming the
// variable. Defaults run everything on this machine. README's Configuration table lists the same
// variables (a test compares the two).
import { Ajv, type ErrorObject } from 'ajv';
import { CronExpressionParser } from 'cron-parser';
import { createPrivateKey } from 'node:crypto';
import { readFileSync } from 'node:fs';

const int = (fallback: number, minimum: number, maximum = Number.MAX_SAFE_INTEGER) =>
  ({ type: 'integer', default: fallback, minimum, maximum }) as const;
const bool = (fallback: boolean) => ({ type: 'boolean', default: fallback }) as const;
const cron = (fallback: string) => ({ type: 'string', format: 'cron', default: fallback }) as const;
const text = (fallback: string) => ({ type: 'string', default: fallback }) as const;
const unset = { type: 'string' } as const;
const LOCAL_DATABASE = 'postgres://postgres@127.0.0.1:5432/analytics';
const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];

/** Every environment variable the service reads. Without a default, a variable is unset unless given. */
export const SETTINGS_SCHEMA = {
  type: 'object',
  properties: {
    DATABASE_URL: { type: 'string', format: 'postgres-url', default: LOCAL_DATABASE },
    /** Defaults to DATABASE_URL. */
    DATABASE_DIRECT_URL: { type: 'string', format: 'postgres-url' },
    /** At least 2: the experiment results job reads events on other connections beside its own transaction. */
    DATABASE_POOL_MAX: int(10, 2),
    ORM_DEBUG: bool(false),
    REDIS_URL: { type: 'string', format: 'redis-url', default: 'redis://127.0.0.1:6379' },
    REDIS_CLUSTER_NODES: { type: 'string', format: 'host-port-list' },
    REDIS_PREFIX: text('analytics'),
    HOST: text('127.0.0.1'),
    PORT: int(8000, 0, 65535),
    /**
     * How many proxies in front of the API append to X-Forwarded-For (0: none, the socket's address is
     * the client's). The client address is the entry this many from the right, as Express's
     * `trust proxy` = N; anything the client wrote left of it is never read.
     */
    TRUST_PROXY: int(0, 0, 32),
    /** `silent` under NODE_ENV=test while unset. */
    LOG_LEVEL: { type: 'string', enum: LOG_LEVELS, default: 'info' },
    NODE_ENV: unset,
    SERVICE_NAME: text('analytics'),
    RATE_LIMIT_ENABLED: bool(true),
    RATE_LIMIT_PER_MINUTE: int(480, 1),
    RATE_LIMIT_PER_HOUR: int(4800, 1),
    AUTH_CACHE_SECONDS: int(60, 0),
    MAX_JSON_BODY_BYTES: int(1024 * 1024, 1),
    MAX_EVENT_BYTES: int(1_000_000, 1024),
    DECODE_BUDGET_BYTES: int(128 * 1024 * 1024, 1024 * 1024),
    DECODE_CONCURRENCY: int(4, 1),
    DECODE_SMALL_BYTES: int(1024 * 1024, 0),
    DECODE_QUEUE_MS: int(2000, 0),
    VALIDATE_RESPONSES: bool(false),
    ADMIN_USER: text('admin'),
    ADMIN_PASSWORD: unset,
    ADMIN_WRITE_PASSWORD: unset,
    ADMIN_EMAIL: text('admin@example.com'),
    METRICS_TOKEN: unset,
    OPS_AUTH_FAILURES_PER_MINUTE: int(5, 1),
    OPS_AUTH_FAILURES_PER_HOUR: int(500, 1),
    WORKER_CONCURRENCY: int(2, 1),
    WORKER_SHUTDOWN_TIMEOUT_MS: int(30_000, 0),
    WORKER_LOCK_DURATION_MS: int(30_000, 1),
    WORKER_METRICS_PORT: int(0, 0, 65535),
    WORKER_METRICS_HOST: text('127.0.0.1'),
    WORKER_METRICS_PUSH_SECONDS: int(15, 1),
    JOB_ATTEMPTS: int(8, 1),
    JOB_BACKOFF_MS: int(5_000, 0),
    ENQUEUE_TIMEOUT_MS: int(1000, 1),
    DELETION_WEEKLY_CRON: cron('0 5 * * 0'),
    DELETION_OFF_PEAK_CRON: cron('0 3 * * *'),
    DELETION_RECONCILE_SECONDS: int(60, 1),
    DELETION_RETRY_FIRST_DELAY_SECONDS: int(900, 1),
    DELETION_RETRY_MAX_DELAY_SECONDS: int(6 * 3600, 1),
    DELETION_CHUNK_SIZE: int(100_000, 1),
    DELETION_LEASE_SECONDS: int(30, 1),
    DELETION_BATCH_SIZE: int(1000, 1),
    /** Ed25519 private key (PKCS#8 PEM) signing deletion receipts; unset: one generated and kept in PostgreSQL. */
    DELETION_RECEIPT_PRIVATE_KEY: unset,
    /** A file holding that PEM instead (a mounted secret). */
    DELETION_RECEIPT_PRIVATE_KEY_FILE: unset,
    EXPERIMENT_RESULTS_CRON: cron('0 2 * * *'),
    GUARDRAIL_CHECK_CRON: cron('*/5 * * * *'),
    /** When bandit experiments are looked at; each reallocates every parameters.allocation.interval_hours. */
    BANDIT_CRON: cron('7 * * * *'),
    STATISTICS_REFRESH_CRON: cron('*/5 * * * *'),
    STATISTICS_REFRESH_ROWS: int(10_000, 0),
    MAINTENANCE_VACUUM_DEAD_ROWS: int(10_000, 1),
    EVENT_PARTITIONS_CRON: cron('0 1 * * *'),
    EVENT_PARTITIONS_AHEAD: int(2, 0, 120),
    WEBHOOK_TIMEOUT_MS: int(10_000, 1),
    WEBHOOK_MAX_RESPONSE_BYTES: int(64 * 1024, 0),
    WEBHOOK_ATTEMPTS: int(12, 1),
    WEBHOOK_BACKOFF_MS: int(10_000, 0),
    WEBHOOK_ALLOW_PRIVATE_URLS: bool(false),
    WEBHOOK_PROJECT_CONCURRENCY: int(1, 1),
    WEBHOOK_MAX_PER_PROJECT: int(10, 1),
    /** Days a tracking plan's quarantined event is kept for replay before the daily upkeep purges it. */
    QUARANTINE_RETENTION_DAYS: int(30, 1, 3650),
    /** A quarantine replay selecting more events than this runs in the worker (202), fewer in the request. */
    QUARANTINE_REPLAY_INLINE_MAX: int(1000, 0),
    /** Which engine answers event analytics: postgres (the `event` table) or clickhouse (capture still writes PostgreSQL). */
    EVENT_STORE: { type: 'string', enum: ['postgres', 'clickhouse'], default: 'postgres' },
    CLICKHOUSE_URL: { type: 'string', format: 'http-url', default: 'http://127.0.0.1:8123' },
    CLICKHOUSE_DATABASE: { type: 'string', pattern: '^[A-Za-z_][A-Za-z0-9_]*$', default: 'analytics' },
    EVENT_SHIP_CRON: cron('* * * * *'),
    EVENT_SHIP_BATCH_SIZE: int(10_000, 1, 1_000_000),
    EVENT_SHIP_SETTLE_SECONDS: int(30, 0),
    EVENT_SHIP_MAX_LAG_SECONDS: int(600, 1),
    /**
     * With EVENT_STORE=clickhouse: hours PostgreSQL keeps an event after it arrived (by created_at) once
     * it is shipped; after each shipping run the worker removes older shipped events from PostgreSQL
     * (ClickHouse alone holds them). Never an unshipped event. Ignored with EVENT_STORE=postgres.
     */
    EVENT_BUFFER_HOURS: int(168, 1),
    /** Where access exports' archives are built and kept (relative: to the working directory); one folder for every worker and API process. */
    ACCESS_EXPORT_DIR: text('data/access-exports'),
    /** Hours an access export's archive can be downloaded; then the expiry job removes it (status expired). */
    ACCESS_EXPORT_TTL_HOURS: int(168, 1),
    /** When expired access-export archives are removed (UTC cron). */
    ACCESS_EXPORT_EXPIRE_CRON: cron('7 * * * *'),
    /** Days the read-access log keeps a read (the daily upkeep purges older rows). */
    ACCESS_LOG_RETENTION_DAYS: int(365, 1, 36_500),
  },
} as const;

type Properties = typeof SETTINGS_SCHEMA.properties;
type Setting = keyof Properties;
type Value<K extends Setting> = Properties[K]['type'] extends 'integer'
  ? number
  : Properties[K]['type'] extends 'boolean'
    ? boolean
    : string;
type WithDefault = { [K in Setting]: Properties[K] extends { default: unknown } ? K : never }[Setting];
/** Settings after validation: those with a default always have a value. */
export type Settings = { [K in WithDefault]: Value<K> } & { [K in Exclude<Setting, WithDefault>]?: Value<K> };

const cronError = (value: string): string | null => {
  try {
    CronExpressionParser.parse(value, { tz: 'UTC' });
    return null;
  } catch (error) {
    return (error as Error).message;
  }
};
const CLUSTER_NODE = /^[^:\s]+:\d{1,5}$/;
const clusterNodes = (value: string) =>
  value
    .split(',')
    .map((node) => node.trim())
    .filter(Boolean);
const hasProtocol = (value: string, protocols: string[]) => {
  try {
    return protocols.includes(new URL(value).protocol);
  } catch {
    return false;
  }
};

const ajv = new Ajv({ allErrors: true, useDefaults: true });
ajv.addFormat('cron', (value: string) => cronError(value) === null);
ajv.addFormat('postgres-url', (value: string) => hasProtocol(value, ['postgres:', 'postgresql:']));
ajv.addFormat('http-url', (value: string) => hasProtocol(value, ['http:', 'https:']));
ajv.addFormat('redis-url', (value: string) => hasProtocol(value, ['redis:', 'rediss:']));
ajv.addFormat('host-port-list', (value: string) => clusterNodes(value).every((node) => CLUSTER_NODE.test(node)));
const validate = ajv.compile(SETTINGS_SCHEMA);

const TRUE = ['1', 'true', 'yes', 'on'];
const FALSE = ['0', 'false', 'no', 'off'];

/** The raw string as typed, for messages; a URL's password is masked. */
const shown = (raw: string) => JSON.stringify(raw.replace(/\/\/([^:@/]*):[^@/]*@/, '//$1:***@'));

function describeError(error: ErrorObject, raw: Record<string, string>): string {
  const name = error.instancePath.slice(1);
  const got = `got ${shown(raw[name] ?? '')}`;
  switch (`${error.keyword}:${error.params.type ?? error.params.format ?? ''}`) {
    case 'type:integer':
      return `${name} must be an integer, ${got}`;
    case 'type:boolean':
      return `${name} must be true or false (1/0, yes/no, on/off), ${got}`;
    case 'format:cron':
      return `${name} must be a cron pattern, ${got}: ${cronError(raw[name])}`;
    case 'format:postgres-url':
      return `${name} must be a postgres:// URL, ${got}`;
    case 'format:http-url':
      return `${name} must be an http:// or https:// URL, ${got}`;
    case 'pattern:':
      return `${name} must be a name of letters, digits and underscores, ${got}`;
    case 'format:redis-url':
      return `${name} must be a redis:// URL, ${got}`;
    case 'format:host-port-list':
      return `${name} must be host:port,host:port,…, got ${shown(clusterNodes(raw[name]).find((n) => !CLUSTER_NODE.test(n))!)}`;
    case 'minimum:':
      return `${name} must be at least ${error.params.limit}, ${got}`;
    case 'maximum:':
      return `${name} must be at most ${error.params.limit}, ${got}`;
    case 'enum:':
      return `${name} must be one of ${(error.params.allowedValues as string[]).join(', ')}, ${got}`;
    default:
      return `${name} ${error.message}, ${got}`;
  }
}

export class ConfigError extends Error {}

/** The environment's settings, typed and validated; an empty value counts as unset. */
export function readSettings(env: Record<string, string | undefined> = process.env): Settings {
  const raw: Record<string, string> = {};
  const input: Record<string, unknown> = {};
  for (const [name, schema] of Object.entries(SETTINGS_SCHEMA.properties)) {
    const value = env[name]?.trim();
    if (value === undefined || value === '') continue;
    raw[name] = value;
    // Typed here rather than by ajv's coercion, which reads "" and " " as 0 and knows only true/false.
    if (schema.type === 'integer') input[name] = /^-?\d+$/.test(value) ? Number(value) : value;
    else if (schema.type === 'boolean') {
      const word = value.toLowerCase();
      input[name] = TRUE.includes(word) ? true : FALSE.includes(word) ? false : value;
    } else input[name] = value;
  }
  if (!validate(input)) throw new ConfigError(validate.errors!.map((error) => describeError(error, raw)).join('; '));
  return input as Settings;
}

export type Config = ReturnType<typeof loadConfig>;

/** DELETION_RECEIPT_PRIVATE_KEY(_FILE) as a checked Ed25519 PEM ('' when neither is set). */
function receiptKeyPem(s: Settings): string {
  const name = s.DELETION_RECEIPT_PRIVATE_KEY_FILE
    ? 'DELETION_RECEIPT_PRIVATE_KEY_FILE'
    : 'DELETION_RECEIPT_PRIVATE_KEY';
  if (s.DELETION_RECEIPT_PRIVATE_KEY && s.DELETION_RECEIPT_PRIVATE_KEY_FILE)
    throw new ConfigError('set DELETION_RECEIPT_PRIVATE_KEY or DELETION_RECEIPT_PRIVATE_KEY_FILE, not both');
  let pem = s.DELETION_RECEIPT_PRIVATE_KEY ?? '';
  if (s.DELETION_RECEIPT_PRIVATE_KEY_FILE) {
    try {
      pem = readFileSync(s.DELETION_RECEIPT_PRIVATE_KEY_FILE, 'utf8');
    } catch (error) {
      throw new ConfigError(`${name} cannot be read: ${(error as Error).message}`);
    }
  }
  if (!pem) return '';
  // A PEM passed in one line with \n escapes (some secret stores) is taken as well.
  pem = pem.replace(/\\n/g, '\n').trim();
  let type: string | undefined;
  try {
    type = createPrivateKey(pem).asymmetricKeyType;
  } catch {
    throw new ConfigError(`${name} must be a PEM private key (openssl genpkey -algorithm ed25519)`);
  }
  if (type !== 'ed25519') throw new ConfigError(`${name} must be an Ed25519 key, got ${type}`);
  return `${pem}\n`;
}

export function loadConfig(env: Record<string, string | undefined> = process.env) {
  const s = readSettings(env);
  if (s.ADMIN_WRITE_PASSWORD && s.ADMIN_WRITE_PASSWORD === s.ADMIN_PASSWORD)
    throw new ConfigError('ADMIN_WRITE_PASSWORD must differ from ADMIN_PASSWORD (the read-only one)');
  const receiptPrivateKey = receiptKeyPem(s);
  return {
    databaseUrl: s.DATABASE_URL,
    /**
     * A connection straight to PostgreSQL, for what needs a session of its own: LISTEN (the auth
     * cache's invalidations), the migration lock, creating the database. Behind a transaction-mode
     * pooler (PgBouncer), DATABASE_URL points at the pooler and this at PostgreSQL.
     */
    databaseDirectUrl: s.DATABASE_DIRECT_URL ?? s.DATABASE_URL,
    databasePoolMax: s.DATABASE_POOL_MAX,
    /** Log every SQL statement MikroORM sends. */
    ormDebug: s.ORM_DEBUG,
    redisUrl: s.REDIS_URL,
    /** host:port,host:port,… of a Redis Cluster; when set, REDIS_URL is not used. */
    redisClusterNodes: clusterNodes(s.REDIS_CLUSTER_NODES ?? ''),
    /** Prefix for every Redis key (queues, throttle counters), so several installs can share a Redis. */
    redisPrefix: s.REDIS_PREFIX,
    host: s.HOST,
    port: s.PORT,
    /**
     * Proxies in front that append to X-Forwarded-For: the client address (guessing throttles, logs)
     * is the entry this many from the right; above 0 X-Forwarded-Proto/-Host also make absolute URLs.
     */
    trustProxy: s.TRUST_PROXY,
    // Tests run quiet unless asked for logs.
    logLevel: s.NODE_ENV === 'test' && !env.LOG_LEVEL?.trim() ? 'silent' : s.LOG_LEVEL,
    /** The `service` field of every log line. */
    serviceName: s.SERVICE_NAME,
    rateLimit: {
      enabled: s.RATE_LIMIT_ENABLED,
      perMinute: s.RATE_LIMIT_PER_MINUTE,
      perHour: s.RATE_LIMIT_PER_HOUR,
    },
    /** How long an API process may reuse an authentication result; changes drop it at once (0: off). */
    authCacheSeconds: s.AUTH_CACHE_SECONDS,
    /** JSON request bodies of the management API. */
    maxJsonBodyBytes: s.MAX_JSON_BODY_BYTES,
    /**
     * One captured event's largest size, measured as PostHog's capture measures it: the Kafka message it
     * would produce (the event's JSON, escaped into the envelope's `data` string). PostHog's default is its
     * capture's KAFKA_PRODUCER_MESSAGE_MAX_BYTES, librdkafka's message.max.bytes of 1 000 000
     * (rust/capture/src/config.rs); past it the sink fails with EventTooBig: 413 and a
     * message_size_too_large ingestion warning (rust/capture/src/ingestion_warnings/legacy.rs).
     */
    maxEventBytes: s.MAX_EVENT_BYTES,
    /**
     * Decoding of SDK bodies (gzip, lz64, base64, JSON) across the requests of this process: each body
     * is first decoded in a small slot allowed `smallBytes` of output (as many small slots as a quarter of
     * `budgetBytes` holds), a larger one again in one of `concurrency` large slots; all together hold at
     * most `budgetBytes` of output. Waiting more than `queueMs` for slots, or passing the budget: 503.
     */
    decode: {
      budgetBytes: s.DECODE_BUDGET_BYTES,
      concurrency: s.DECODE_CONCURRENCY,
      smallBytes: s.DECODE_SMALL_BYTES,
      queueMs: s.DECODE_QUEUE_MS,
    },
    /** Tracking plans (shared/tracking-plan/): how long quarantined events are kept; replays run in the request up to inlineMax events. */
    trackingPlan: {
      quarantineRetentionDays: s.QUARANTINE_RETENTION_DAYS,
      replayInlineMax: s.QUARANTINE_REPLAY_INLINE_MAX,
    },
    /** How long a request may wait for Redis before its deletion rows are left to the reconciler. */
    enqueueTimeoutMs: s.ENQUEUE_TIMEOUT_MS,
    worker: {
      concurrency: s.WORKER_CONCURRENCY,
      shutdownTimeoutMs: s.WORKER_SHUTDOWN_TIMEOUT_MS,
      /** How long a job stays claimed without renewal; a dead worker's job is taken over after about this long. */
      lockDurationMs: s.WORKER_LOCK_DURATION_MS,
      /** Optional HTTP port of the worker's Prometheus metrics (0: not served), and where it listens. */
      metricsPort: s.WORKER_METRICS_PORT,
      metricsHost: s.WORKER_METRICS_HOST,
      /** How often the worker pushes its figures into Redis for the API's /metrics/global. */
      metricsPushSeconds: s.WORKER_METRICS_PUSH_SECONDS,
    },
    /** BullMQ's own retries of a failed job (quick, for passing faults) before the job counts as failed. */
    jobs: {
      attempts: s.JOB_ATTEMPTS,
      backoffMs: s.JOB_BACKOFF_MS,
    },
    deletion: {
      /** When scheduled deletion requests are released (UTC crons). */
      weeklyCron: s.DELETION_WEEKLY_CRON,
      offPeakCron: s.DELETION_OFF_PEAK_CRON,
      /**
       * How often each worker reconciles PostgreSQL with the queue (a timer in the process, not a
       * Redis-held schedule, so it runs even when Redis lost every scheduler).
       */
      reconcileSeconds: s.DELETION_RECONCILE_SECONDS,
      /** A request whose job failed finally is tried again after this delay, doubling per failure up to the maximum. */
      retryFirstDelaySeconds: s.DELETION_RETRY_FIRST_DELAY_SECONDS,
      retryMaxDelaySeconds: s.DELETION_RETRY_MAX_DELAY_SECONDS,
      /** Rows a delete statement aims at. */
      chunkSize: s.DELETION_CHUNK_SIZE,
      /** How long a claim on a request holds without renewal. */
      leaseSeconds: s.DELETION_LEASE_SECONDS,
      /** Event-deletion requests of one project handled in one pass. */
      batchSize: s.DELETION_BATCH_SIZE,
      /** The Ed25519 key (PEM) signing receipts; '': a generated one kept in PostgreSQL. */
      receiptPrivateKey,
    },
    /** When the other scheduled jobs run (UTC crons). */
    schedules: {
      experimentResultsCron: s.EXPERIMENT_RESULTS_CRON,
      /** Guardrail checks of running experiments (stats_config.guardrails). */
      guardrailCheckCron: s.GUARDRAIL_CHECK_CRON,
      /** Bandit experiments looked at (each reallocates when its interval_hours have passed). */
      banditCron: s.BANDIT_CRON,
      statisticsRefreshCron: s.STATISTICS_REFRESH_CRON,
      eventPartitionsCron: s.EVENT_PARTITIONS_CRON,
      /** Shipping events to ClickHouse (scheduled only with EVENT_STORE=clickhouse). */
      eventShipCron: s.EVENT_SHIP_CRON,
    },
    /** The event store (shared/events/event-store.ts): which engine, and where ClickHouse is. */
    events: {
      engine: s.EVENT_STORE as 'postgres' | 'clickhouse',
      clickhouseUrl: s.CLICKHOUSE_URL,
      clickhouseDatabase: s.CLICKHOUSE_DATABASE,
      /** The shipper (EVENT_STORE=clickhouse): events per batch, and how old an event must be to go. */
      shipBatchSize: s.EVENT_SHIP_BATCH_SIZE,
      shipSettleSeconds: s.EVENT_SHIP_SETTLE_SECONDS,
      /** /_ready reports event_shipping unavailable when the oldest unshipped event is older than this. */
      shipMaxLagSeconds: s.EVENT_SHIP_MAX_LAG_SECONDS,
      /** Hours PostgreSQL keeps a shipped event (by created_at) before only ClickHouse holds it (shared/events/buffer.ts). */
      bufferHours: s.EVENT_BUFFER_HOURS,
    },
    /** Access exports (shared/access-exports): where archives are kept, for how long, and when expired ones go. */
    accessExports: {
      dir: s.ACCESS_EXPORT_DIR,
      ttlHours: s.ACCESS_EXPORT_TTL_HOURS,
      expireCron: s.ACCESS_EXPORT_EXPIRE_CRON,
    },
    accessLog: {
      /** Days a recorded read is kept; the daily upkeep (EVENT_PARTITIONS_CRON) purges older ones. */
      retentionDays: s.ACCESS_LOG_RETENTION_DAYS,
    },
    maintenance: {
      /** Months after the current one that get their event partition in advance. */
      eventPartitionsAhead: s.EVENT_PARTITIONS_AHEAD,
      /** Rows changed since a table's last ANALYZE that make it due. */
      statisticsRefreshRows: s.STATISTICS_REFRESH_ROWS,
      /**
       * Dead rows that make a table due for VACUUM (ANALYZE): a deletion job removing more queues one of the
       * tables it deleted from; the statistics job vacuums any table past it (or a small one with a fifth dead).
       */
      vacuumDeadRows: s.MAINTENANCE_VACUUM_DEAD_ROWS,
    },
    /** Webhook deliveries (shared/webhooks/): each POST to a customer's URL and its retries. */
    webhooks: {
      /** A delivery attempt (connect, answer and the body read) is cut off after this long. */
      timeoutMs: s.WEBHOOK_TIMEOUT_MS,
      /** At most this much of a receiver's answer is read; the rest is dropped unread. */
      maxResponseBytes: s.WEBHOOK_MAX_RESPONSE_BYTES,
      /** Attempts of one delivery (BullMQ's, exponential backoff) before it counts as failed. */
      attempts: s.WEBHOOK_ATTEMPTS,
      /** The first retry's delay; each next one doubles it. */
      backoffMs: s.WEBHOOK_BACKOFF_MS,
      /** Whether a webhook may post to an address that is not public unicast (loopback, private...: refused by default). */
      allowPrivateUrls: s.WEBHOOK_ALLOW_PRIVATE_URLS,
      /**
       * Attempts of one project's deliveries that may run at once over all workers: the others wait, so
       * that its slow receivers cannot take every worker slot from other projects' deliveries.
       */
      projectConcurrency: s.WEBHOOK_PROJECT_CONCURRENCY,
      /** Webhooks a project may have (a create beyond is 400). */
      maxPerProject: s.WEBHOOK_MAX_PER_PROJECT,
    },
    /**
     * Basic-auth credentials of the operator pages (/admin/queues, /admin/deletions): ADMIN_PASSWORD
     * reads, ADMIN_WRITE_PASSWORD may also change queues; not served while both are unset.
     */
    adminUser: s.ADMIN_USER,
    adminPassword: s.ADMIN_PASSWORD ?? '',
    adminWritePassword: s.ADMIN_WRITE_PASSWORD ?? '',
    /** The first user `npm start` creates on a new install. */
    adminEmail: s.ADMIN_EMAIL,
    /** Bearer token Prometheus sends to scrape /metrics; while unset /metrics answers 404. */
    metricsToken: s.METRICS_TOKEN ?? '',
    /**
     * Wrong dashboard passwords or metrics tokens one client (address and user name, or a signed-in
     * browser's proof) may try per minute before 429.
     */
    opsAuthFailuresPerMinute: s.OPS_AUTH_FAILURES_PER_MINUTE,
    /** Wrong ones all clients without a proof may try together per hour, for each of the two, before 429. */
    opsAuthFailuresPerHour: s.OPS_AUTH_FAILURES_PER_HOUR,
    /** Check every JSON response against the route's documented schema (tests turn this on). */
    validateResponses: s.VALIDATE_RESPONSES,
  };
}

/** The process's configuration. A bad setting ends the process here with one line naming it. */
export const config = loadProcessConfig();

function loadProcessConfig(): Config {
  try {
    return loadConfig();
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    process.stderr.write(`Configuration error: ${error.message}\n`);
    process.exit(1);
  }
}
