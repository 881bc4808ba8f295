// Shared test fixtures: a real API on a random port, and isolated accounts in the real database.
import type { MikroORM } from '@mikro-orm/postgresql';
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { afterAll } from 'vitest';
import type { Job, Queue } from 'bullmq';
import { createApp, listen } from '../api/app.ts';
import { createOrganization, createPersonalApiKey, createProject, createUser } from '../shared/accounts/service.ts';
import { loadConfig, type Config } from '../shared/platform/config.ts';
import { initOrm, migrate } from '../shared/platform/db/orm.ts';
import pg from 'pg';
import { createApiRedis, type RedisConnection } from '../shared/platform/redis.ts';
import { createQueues } from '../shared/platform/queues.ts';
import { startAuthCache } from '../api/http/auth-cache.ts';
import { startFlagCache } from '../api/flags/cache.ts';
import { startSuppressionCache } from '../api/capture/suppression-cache.ts';
import { startProjectCache } from '../api/capture/project-cache.ts';
import { startPlanCache } from '../api/tracking-plan/cache.ts';
import type { AppDeps } from '../api/deps.ts';
import { createEventStore } from '../shared/events/create.ts';

export interface TestApi {
  baseUrl: string;
  orm: MikroORM;
  redis: RedisConnection;
  config: Config;
  deps: AppDeps;
  close: () => Promise<void>;
}

/** Serves a Koa app on a free port of this machine; the caller closes the server. */
export async function serveApp(app: ReturnType<typeof createApp>): Promise<{ server: Server; baseUrl: string }> {
  const server: Server = await new Promise((resolve) => {
    const s = listen(app, 0, '127.0.0.1', () => resolve(s));
  });
  return { server, baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
}

/**
 * Starts the real app against the test database and Redis. Throttling is off unless asked for; so
 * are the flag definition cache (tests change flags with SQL and ask again at once; its own tests
 * turn it on), the deletion suppression cache and capture's project cache (capture then reads PostgreSQL;
 * their tests turn them on). `clock` fixes the time the throttle counts in.
 */
export async function startApi(
  overrides: (config: Config) => void = () => undefined,
  options: {
    clock?: () => number;
    flagCache?: boolean;
    suppressionCache?: boolean;
    projectCache?: boolean;
    planCache?: boolean;
  } = {},
): Promise<TestApi> {
  const config = loadConfig();
  config.rateLimit.enabled = false;
  // Tests change keys and memberships and ask again at once; the cache's own tests turn it on.
  config.authCacheSeconds = 0;
  overrides(config);
  const orm = await initOrm(config.databaseUrl, config.databasePoolMax);
  const redis = createApiRedis({ url: config.redisUrl, clusterNodes: config.redisClusterNodes });
  redis.on('error', () => undefined); // tests that stop a Redis expect connection errors
  const authCache = await startAuthCache(config.databaseDirectUrl, config.authCacheSeconds);
  const flagCache = options.flagCache ? await startFlagCache(config.databaseDirectUrl) : null;
  const suppressionCache = options.suppressionCache ? await startSuppressionCache(config.databaseDirectUrl) : null;
  const projectCache = options.projectCache ? await startProjectCache(config.databaseDirectUrl) : null;
  // On unless turned off: a plan changed through the API is seen at once by the process that made it.
  const planCache = options.planCache === false ? null : await startPlanCache(config.databaseDirectUrl);
  const deps: AppDeps = {
    config,
    orm,
    events: createEventStore(config, orm),
    redis,
    queues: createQueues(redis, config),
    authCache,
    flagCache,
    suppressionCache,
    projectCache,
    planCache,
    clock: options.clock,
  };
  const { server, baseUrl } = await serveApp(createApp(deps));
  return {
    baseUrl,
    orm,
    redis,
    config,
    deps,
    close: async () => {
      await new Promise((resolve) => server.close(resolve));
      server.closeAllConnections?.();
      await Promise.allSettled(Object.values(deps.queues).map((q) => q.close()));
      redis.disconnect();
      await authCache?.stop();
      await flagCache?.stop();
      await suppressionCache?.stop();
      await projectCache?.stop();
      await planCache?.stop();
      await orm.close();
    },
  };
}

/**
 * A test file's API and one account, at the file's top level (`const { api, account } = await
 * apiWithAccount()`); the API closes after the file's tests.
 */
export async function apiWithAccount(
  overrides?: (config: Config) => void,
): Promise<{ api: TestApi; account: TestAccount }> {
  const api = await startApi(overrides);
  afterAll(() => api.close());
  return { api, account: await createAccount(api.orm) };
}

export interface TestAccount {
  organizationId: string;
  projectId: number;
  projectToken: string;
  userId: number;
  apiKey: string;
}

/** A fresh organization with one project, a member user and a key with the given scopes. */
export async function createAccount(orm: MikroORM, scopes: string[] | null = ['*']): Promise<TestAccount> {
  const em = orm.em.fork();
  const suffix = randomUUID().slice(0, 8);
  const organization = await createOrganization(em, `Org ${suffix}`);
  const project = await createProject(em, organization.id, `Project ${suffix}`);
  const user = await createUser(em, {
    email: `user-${suffix}@example.com`,
    organizationId: organization.id,
    currentProjectId: project.id,
  });
  const { value } = await createPersonalApiKey(em, { userId: user.id, label: 'test', scopes });
  return {
    organizationId: organization.id,
    projectId: project.id,
    projectToken: project.apiToken,
    userId: user.id,
    apiKey: value,
  };
}

/** Another key of the same user, with other scopes or scoping. */
export async function createKey(
  orm: MikroORM,
  userId: number,
  input: { scopes?: string[] | null; scopedTeams?: number[]; scopedOrganizations?: string[] } = {},
): Promise<string> {
  return (await createKeyWithId(orm, userId, input)).value;
}

/** A new personal API key: its value and its row's id (to revoke exactly that key). */
export async function createKeyWithId(
  orm: MikroORM,
  userId: number,
  input: { scopes?: string[] | null; scopedTeams?: number[]; scopedOrganizations?: string[] } = {},
): Promise<{ id: string; value: string }> {
  const { key, value } = await createPersonalApiKey(
    orm.em.fork(),
    {
      userId,
      label: 'test',
      scopes: input.scopes === undefined ? ['*'] : input.scopes,
      scopedTeams: input.scopedTeams ?? null,
      scopedOrganizations: input.scopedOrganizations ?? null,
    }, // Fixtures may hold many keys, and keys whose scoping no longer matches the user's memberships
    // (the user left an organization, a project was deleted): what the API must still handle.
    { limit: null, checkScoping: false },
  );
  return { id: key.id, value };
}

export interface CallResult {
  status: number;
  body: any;
  headers: Headers;
  text: string;
}

/** A JSON request; `body` may be a string to send as-is (for malformed-input tests). */
export async function call(
  baseUrl: string,
  method: string,
  path: string,
  options: { key?: string; body?: unknown; headers?: Record<string, string> } = {},
): Promise<CallResult> {
  const headers: Record<string, string> = { ...(options.headers ?? {}) };
  if (options.key) headers.authorization = `Bearer ${options.key}`;
  let payload: string | undefined;
  if (options.body !== undefined) {
    payload = typeof options.body === 'string' ? options.body : JSON.stringify(options.body);
    headers['content-type'] ??= 'application/json';
  }
  const response = await fetch(baseUrl + path, { method, headers, body: payload });
  const text = await response.text();
  let body: any = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    body = text;
  }
  return { status: response.status, body, headers: response.headers, text };
}

/** A Redis key prefix of one test file's own, so its queues and schedulers are invisible to other files. */
export const uniqueRedisPrefix = () => `t-${randomUUID().slice(0, 8)}`;

/** An in-process worker (real BullMQ on the real Redis) under `redisPrefix`. */
export async function startTestWorker(redisPrefix: string, overrides: (config: Config) => void = () => undefined) {
  const { createWorkerRedis } = await import('../shared/platform/redis.ts');
  const { startWorkers } = await import('../worker/runtime.ts');
  const { logger } = await import('../shared/platform/logger.ts');
  const config = loadConfig();
  config.redisPrefix = redisPrefix;
  overrides(config);
  const orm = await initOrm(config.databaseUrl);
  const connection = createWorkerRedis({ url: config.redisUrl, clusterNodes: config.redisClusterNodes });
  const deps = {
    config,
    orm,
    events: createEventStore(config, orm),
    connection,
    logger,
    queues: createQueues(connection, config),
  };
  const running = startWorkers(deps);
  await running.started;
  return {
    deps,
    close: async () => {
      await running.close(5000);
      connection.disconnect();
      await orm.close();
    },
  };
}

/**
 * A test file's API and in-process worker under a Redis prefix of their own, and `accounts` accounts
 * (one by default), at the file's top level (`const { api, worker, accounts: [account] } = await
 * apiAndWorker()`); both close after the file's tests. `configure` applies to both configurations;
 * `database` (an ownDatabase() URL) points both at it.
 */
export async function apiAndWorker(
  options: { configure?: (config: Config) => void; flagCache?: boolean; accounts?: number; database?: string } = {},
) {
  const prefix = uniqueRedisPrefix();
  const configure = (config: Config) => {
    if (options.database) {
      config.databaseUrl = options.database;
      config.databaseDirectUrl = options.database;
    }
    options.configure?.(config);
  };
  const api = await startApi(
    (config) => {
      config.redisPrefix = prefix;
      configure(config);
    },
    { flagCache: options.flagCache },
  );
  afterAll(() => api.close());
  const worker = await startTestWorker(prefix, configure);
  afterAll(() => worker.close()); // hooks run in reverse: the worker closes before the API
  const accounts: TestAccount[] = [];
  for (let i = 0; i < (options.accounts ?? 1); i++) accounts.push(await createAccount(api.orm));
  return { prefix, api, worker, accounts };
}

/** A test file's in-process worker under its own Redis prefix, and one account; closed after the file's tests. */
export async function workerWithAccount(overrides?: (config: Config) => void) {
  const worker = await startTestWorker(uniqueRedisPrefix(), overrides);
  afterAll(() => worker.close());
  return { worker, account: await createAccount(worker.deps.orm) };
}

/** Waits until `job` has completed or finally failed (a failure awaiting retry is neither) and returns it as stored. */
export async function settledJob(queue: Queue, job: Job): Promise<Job> {
  await eventually(async () => (await job.isCompleted()) || (await job.isFailed()) || null);
  return (await queue.getJob(job.id!))!;
}

/** Polls `check` until it returns a truthy value or `timeoutMs` passes. */
export async function eventually<T>(
  check: () => Promise<T>,
  timeoutMs = 20_000,
  intervalMs = 100,
): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value as NonNullable<T>;
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

/**
 * A migrated database of the test file's own (`<test database>_<name>`, made anew), for tests whose
 * assertions depend on no other transaction in the database (VACUUM removes dead rows only past the
 * oldest snapshot of its own database). `{ migrated: false }` leaves it empty.
 */
export async function ownDatabase(name: string, options: { migrated?: boolean } = {}): Promise<string> {
  const base = new URL(loadConfig().databaseDirectUrl);
  const database = `${base.pathname.slice(1)}_${name}`;
  const admin = new pg.Client({ connectionString: base.toString() });
  await admin.connect();
  try {
    await admin.query(`drop database if exists "${database}" with (force)`);
    await admin.query(`create database "${database}"`);
  } finally {
    await admin.end();
  }
  const url = new URL(base);
  url.pathname = `/${database}`;
  if (options.migrated === false) return url.toString();
  const orm = await initOrm(url.toString(), 2);
  try {
    await migrate(orm, url.toString());
  } finally {
    await orm.close();
  }
  return url.toString();
}

/**
 * `npm run manage -- …args --json` as a process of its own (`env` added to this one's, logs silent):
 * its exit code, its output parsed (null if not JSON) and its stderr.
 */
export function manageJson(
  args: string[],
  env: Record<string, string> = {},
): Promise<{ code: number; json: any; stderr: string }> {
  const root = fileURLToPath(new URL('..', import.meta.url));
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ['scripts/manage.ts', ...args, '--json'],
      { cwd: root, env: { ...process.env, LOG_LEVEL: 'silent', ...env } },
      (error, stdout, stderr) => {
        let json: any = null;
        try {
          json = JSON.parse(stdout);
        } catch {}
        resolve({ code: error ? Number(error.code ?? 1) : 0, json, stderr });
      },
    );
  });
}
