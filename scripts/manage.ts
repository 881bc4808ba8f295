// `npm run manage -- <object> <action> [options]` (`npm run -s manage -- … --json` to pipe JSON): organizations, projects, users, personal API
// keys, deletions, schedules, queues and migrations from the command line. Bad input, a database
// that does not exist or is not migrated, and an unreachable PostgreSQL or Redis exit 1 with one
// line on stderr; a malformed command exits 2 with usage; `help` exits 0 with usage on stdout.
// No command creates or migrates a database: `npm run migrate` and `npm start` do.
import { isBigintId, isId } from '../shared/platform/ids.ts';
import { realpathSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parseArgs, type ParseArgsOptionsConfig } from 'node:util';
import type { EntityManager } from '@mikro-orm/postgresql';
import pg from 'pg';
import {
  AccountError,
  createOrganization,
  createPersonalApiKey,
  createProject,
  createUser,
  membershipLevel,
  revokePersonalApiKey,
  rollPersonalApiKey,
  rotateProjectToken,
  setMembership,
  setUserActive,
} from '../shared/accounts/index.ts';
import { config } from '../shared/platform/config.ts';
import { initOrm, migrationStates, type MigrationState } from '../shared/platform/db/orm.ts';
import { cancelDeletion } from '../shared/deletions/index.ts';
import { deletionReceipt } from '../shared/deletions/index.ts';
import {
  deletionRequestsByIds,
  listOperatorDeletionRequests,
  OPERATOR_DELETION_FILTERS,
  type OperatorDeletionFilter,
  releaseDeletions,
  retryDeletion,
} from '../shared/deletions/index.ts';
import { createQueues, enqueueDeletions, QUEUE_NAMES } from '../shared/platform/queues.ts';
import { createApiRedis, type RedisConnection } from '../shared/platform/redis.ts';
import { isoTimestamp } from '../shared/platform/time.ts';
import { defaultSchedules, nextRun, recordedSchedules, setSchedule } from '../shared/platform/schedules.ts';
import { JOBS } from '../shared/platform/jobs.ts';
import { sql } from 'kysely';
import { db } from '../shared/platform/db/kysely.ts';
import {
  dropPersonPropertyIndexes,
  indexPersonProperty,
  personIndexBuilds,
  PROPERTY_INDEX_KINDS,
  personPropertyIndexes,
} from '../shared/persons/index.ts';
import { storableText } from '../shared/platform/db/property-filters.ts';
import { ClickHouseLogLevel, createClient } from '@clickhouse/client';
import { createClickHouseEventStore } from '../shared/events/index.ts';
import { backfillEvents } from '../shared/events/index.ts';
import { createEventStore } from '../shared/events/index.ts';
import { readFileSync } from 'node:fs';
import { diffPlan, PlanInputError, putPlan } from '../shared/tracking-plan/index.ts';

/** A person property key as the filters take it: non-empty text PostgreSQL can store. */
function propertyKey(value: unknown): string {
  const key = String(value);
  if (!key || key.length > 400 || !storableText(key)) throw new AccountError(`Invalid property key: ${key}`);
  return key;
}

class UsageError extends Error {}
/** Something the operator must fix (an unreachable service, a database to migrate): one line, exit 1. */
class OperatorError extends Error {}

type Values = Record<string, string | boolean | undefined>;
/**
 * What a command needs: a migrated database (the default; it is handed an EntityManager), or a database
 * in any state or only Redis (it opens what it reads itself).
 */
type Command = {
  usage: string;
  options: ParseArgsOptionsConfig;
  required?: string[];
  /** The name of the one positional argument the command takes (required), e.g. `file`. */
  positional?: string;
} & (
  | { needs?: 'migrated'; run: (em: EntityManager, values: Values, io: Output) => Promise<unknown> }
  | { needs: 'database' | 'redis'; run: (values: Values) => Promise<unknown> }
);
const opensItsOwn = (command: Command): command is Extract<Command, { needs: 'database' | 'redis' }> =>
  command.needs === 'database' || command.needs === 'redis';

/** host:port of a connection URL, for messages (never its password). */
const where = (url: string) => {
  try {
    return new URL(url).host;
  } catch {
    return 'the configured address';
  }
};
/** The reason of a connection error; Node's AggregateError (IPv4 and IPv6 tried) has no message of its own. */
const reason = (error: unknown): string => {
  if (typeof error === 'object' && error !== null) {
    if ('message' in error && error.message) return String(error.message);
    if ('code' in error && error.code) return String(error.code);
    if ('errors' in error && Array.isArray(error.errors)) {
      const all = error.errors.map(reason).join(', ');
      if (all) return all;
    }
  }
  return String(error);
};

/**
 * Checks the database without changing it: it must exist, and unless the command only reads the
 * migration state, every migration of this version must be applied.
 */
async function migrationState(databaseUrl: string): Promise<MigrationState[]> {
  const client = new pg.Client({ connectionString: databaseUrl, connectionTimeoutMillis: 5000 });
  client.on('error', () => undefined);
  const name = decodeURIComponent(new URL(databaseUrl).pathname.slice(1));
  try {
    await client.connect();
  } catch (error) {
    if (typeof error === 'object' && error !== null && 'code' in error && error.code === '3D000')
      throw new OperatorError(
        `database "${name}" does not exist at ${where(databaseUrl)}; check DATABASE_URL, or create and migrate it with \`npm run migrate\``,
      );
    throw new OperatorError(`cannot reach PostgreSQL at ${where(databaseUrl)} (${reason(error)})`);
  }
  try {
    return await migrationStates((sql) => client.query<{ name: string; executed_at: Date }>(sql).then((r) => r.rows));
  } finally {
    await client.end().catch(() => undefined);
  }
}

async function connectRedis(): Promise<RedisConnection> {
  const redis = createApiRedis();
  const target = config.redisClusterNodes.length ? config.redisClusterNodes.join(',') : where(config.redisUrl);
  try {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('no answer within 5 s')), 5000);
      redis.once('ready', () => {
        clearTimeout(timer);
        resolve();
      });
      redis.once('error', (error) => {
        clearTimeout(timer);
        reject(error);
      });
    });
  } catch (error) {
    redis.disconnect();
    throw new OperatorError(`cannot reach Redis at ${target} (${reason(error)})`);
  }
  redis.on('error', () => undefined);
  return redis;
}

/**
 * Copies an existing install's events to ClickHouse through the shipper's walk (shared/events/shipper.ts
 * backfillEvents): progress on stderr, the mark kept in PostgreSQL, so a run stopped anywhere resumes
 * and a run again copies nothing.
 */
async function backfillCommand(em: EntityManager, v: Values, io: Output) {
  if (config.events.engine !== 'clickhouse')
    throw new OperatorError(
      'EVENT_STORE is postgres: run this with EVENT_STORE=clickhouse and CLICKHOUSE_URL (those the API and worker will use)',
    );
  const projectId = v.project === undefined ? undefined : projectIds(v.project)[0];
  if (
    projectId !== undefined &&
    !(await db(em).selectFrom('project').select('id').where('id', '=', projectId).executeTakeFirst())
  )
    throw new AccountError(`No project ${projectId}`);
  const batchSize = v['batch-size'] === undefined ? config.events.shipBatchSize : Number(v['batch-size']);
  if (!Number.isInteger(batchSize) || batchSize < 1 || batchSize > 1_000_000)
    throw new AccountError(`Invalid batch size: ${String(v['batch-size'])} (1 to 1000000)`);
  const url = config.events.clickhouseUrl;
  // The client's own error log is off: a failure is the command's one line.
  const client = createClient({ url, log: { level: ClickHouseLogLevel.OFF } });
  const store = createClickHouseEventStore(client, config.events.clickhouseDatabase, { em });
  try {
    try {
      await store.migrate();
    } catch (error) {
      throw new OperatorError(`cannot reach ClickHouse at ${where(url)} (${reason(error)})`);
    }
    const scope = projectId === undefined ? 'all projects' : `project ${projectId}`;
    const result = await backfillEvents({ em }, store, {
      batchSize,
      settleSeconds: config.events.shipSettleSeconds,
      projectId,
      onBusy: () => io.err('events backfill: the worker is shipping; waiting for the mark'),
      onProgress: (p) => {
        const share = p.total > 0 ? ` (${Math.min(100, Math.floor((100 * p.events) / p.total))}%)` : '';
        const rate = p.elapsedMs > 0 ? `, ${Math.round((p.events * 1000) / p.elapsedMs)} events/s` : '';
        io.err(`events backfill, ${scope}: ${p.events} of ${p.total} events${share}${rate}`);
      },
    });
    return {
      project: projectId ?? 'all',
      shipped: result.events,
      batches: result.batches,
      distinct_ids: result.distinctIds,
      // Younger than EVENT_SHIP_SETTLE_SECONDS: the worker's shipper (or the next backfill) takes them.
      left: result.left,
      seconds: Math.round(result.elapsedMs / 100) / 10,
    };
  } finally {
    await store.close();
  }
}

/** Job counts per state of every queue, and how long its oldest waiting job has waited. */
async function queueStatus() {
  const redis = await connectRedis();
  const queues = createQueues(redis, config);
  try {
    const now = Date.now();
    return await Promise.all(
      Object.values(queues).map(async (queue) => {
        const counts = await queue.getJobCounts(
          'waiting',
          'prioritized',
          'active',
          'delayed',
          'waiting-children',
          'completed',
          'failed',
        );
        // The wait list is in order of arrival; a job that was delayed has waited since its delay ended.
        const [oldest] = await queue.getJobs(['waiting'], 0, 0, true);
        const since = oldest ? oldest.timestamp + (oldest.delay ?? 0) : null;
        return {
          queue: queue.name,
          waiting: counts.waiting,
          prioritized: counts.prioritized,
          active: counts.active,
          delayed: counts.delayed,
          waiting_children: counts['waiting-children'],
          paused: await queue.isPaused(),
          completed: counts.completed,
          failed: counts.failed,
          oldest_waiting_since: since === null ? null : new Date(since).toISOString(),
          oldest_waiting_seconds: since === null ? null : Math.max(0, Math.round((now - since) / 1000)),
        };
      }),
    );
  } finally {
    await Promise.allSettled(Object.values(queues).map((q) => q.close()));
    redis.disconnect();
  }
}

const text = (o: string) => ({ [o]: { type: 'string' as const } });
/** Rows with their time columns as ISO strings (the ORM's raw queries give PostgreSQL's text form). */
const withTimes = <K extends string, T extends Record<K, Date | string | null>>(rows: T[], columns: K[]) =>
  rows.map((row) => ({ ...row, ...Object.fromEntries(columns.map((c) => [c, isoTimestamp(row[c])])) }));
const list = (value: unknown) =>
  typeof value === 'string'
    ? value
        .split(',')
        .map((v) => v.trim())
        .filter(Boolean)
    : [];
const projectIds = (value: unknown) =>
  list(value).map((v) => {
    if (!isId(v)) throw new AccountError(`Invalid project id: ${v}`);
    return Number(v);
  });

async function userByEmail(em: EntityManager, email: string) {
  const user = await db(em)
    .selectFrom('app_user')
    .select(['id', 'email'])
    .where((eb) => eb(eb.fn('lower', ['email']), '=', eb.fn('lower', [eb.val(email)])))
    .executeTakeFirst();
  if (!user) throw new AccountError(`No user with the email ${email}`);
  return user;
}

/** Deactivating a user makes their keys answer 401 at once; activating brings them back. */
const userActiveCommand = (active: boolean): Command => ({
  usage: '--user EMAIL',
  options: text('user'),
  required: ['user'],
  run: async (em, v) => {
    const user = await userByEmail(em, String(v.user));
    await setUserActive(em, user.id, active);
    return { user: user.email, active };
  },
});

/**
 * Hands deletion requests to the worker now. Without Redis they are still due in PostgreSQL and the
 * worker's reconciler starts them within DELETION_RECONCILE_SECONDS; the answer says which happened.
 */
/** Producers of the worker's queues for one piece of work, on a connection that fails fast; closed after it. */
async function withProducers<T>(work: (queues: ReturnType<typeof createQueues>) => Promise<T>): Promise<T> {
  const redis = createApiRedis();
  redis.on('error', () => undefined);
  const queues = createQueues(redis, config);
  try {
    return await work(queues);
  } finally {
    await Promise.allSettled(Object.values(queues).map((q) => q.close()));
    redis.disconnect();
  }
}

const REDIS_AWAY = `Redis unreachable: the worker's reconciler starts it within ${config.deletion.reconcileSeconds} s`;

/** Hands work to the worker now ('queued'), or says that its reconciler will. */
function handToWorker(
  enqueue: (queue: ReturnType<typeof createQueues>['deletions']) => Promise<unknown>,
): Promise<string> {
  return withProducers((queues) => enqueue(queues.deletions)).then(
    () => 'queued',
    () => REDIS_AWAY,
  );
}

/** How often long work (an index build) reports its progress on stderr. */
const PROGRESS_EVERY_MS = 2000;

const commands: Record<string, Command> = {
  'org create': {
    usage: '--name NAME',
    options: text('name'),
    required: ['name'],
    run: async (em, v) => {
      const org = await createOrganization(em, String(v.name));
      return { id: org.id, name: org.name };
    },
  },
  'org list': {
    usage: '',
    options: {},
    run: async (em) =>
      withTimes(
        await db(em)
          .selectFrom('organization as o')
          .select((eb) => [
            'o.id',
            'o.name',
            eb
              .selectFrom('organization_membership as m')
              .select((m) => m.cast<number>(m.fn.countAll(), 'integer').as('n'))
              .whereRef('m.organization_id', '=', 'o.id')
              .as('members'),
            eb
              .selectFrom('project as p')
              .select((p) => p.cast<number>(p.fn.countAll(), 'integer').as('n'))
              .whereRef('p.organization_id', '=', 'o.id')
              .as('projects'),
            'o.created_at',
          ])
          .orderBy('o.created_at')
          .orderBy('o.id')
          .execute(),
        ['created_at'],
      ),
  },
  'org add-member': {
    usage: '--org ORG_ID --user EMAIL [--level member|admin|owner]',
    options: { ...text('org'), ...text('user'), ...text('level') },
    required: ['org', 'user'],
    run: async (em, v) => {
      const user = await userByEmail(em, String(v.user));
      await setMembership(em, String(v.org), user.id, membershipLevel(String(v.level ?? 'member')));
      return { organization: v.org, user: user.email, level: String(v.level ?? 'member') };
    },
  },
  'project create': {
    usage: '--org ORG_ID --name NAME [--timezone Europe/Berlin]',
    options: { ...text('org'), ...text('name'), ...text('timezone') },
    required: ['org', 'name'],
    run: async (em, v) => {
      const project = await createProject(em, String(v.org), String(v.name), String(v.timezone ?? 'UTC'));
      return { id: project.id, name: project.name, organization: project.organizationId, api_token: project.apiToken };
    },
  },
  'project list': {
    usage: '[--org ORG_ID]',
    options: text('org'),
    run: (em, v) => {
      const projects = db(em)
        .selectFrom('project')
        .select(['id', 'organization_id as organization', 'name', 'timezone', 'api_token'])
        .orderBy('id');
      // As text: an organization id that is no uuid matches nothing.
      return (
        v.org === undefined
          ? projects
          : projects.where((eb) => eb(eb.cast<string>('organization_id', 'text'), '=', String(v.org)))
      ).execute();
    },
  },
  'project rotate-token': {
    usage: '--project PROJECT_ID',
    options: text('project'),
    required: ['project'],
    run: async (em, v) => {
      const [id] = projectIds(v.project);
      return { id, api_token: await rotateProjectToken(em, id) };
    },
  },
  'user create': {
    usage: '--email EMAIL --org ORG_ID [--first-name F] [--last-name L] [--level member|admin|owner]',
    options: { ...text('email'), ...text('org'), ...text('first-name'), ...text('last-name'), ...text('level') },
    required: ['email', 'org'],
    run: async (em, v) => {
      const level = membershipLevel(String(v.level ?? 'member'));
      const first = await db(em)
        .selectFrom('project')
        .select('id')
        .where((eb) => eb(eb.cast<string>('organization_id', 'text'), '=', String(v.org)))
        .orderBy('id')
        .limit(1)
        .executeTakeFirst();
      const user = await createUser(em, {
        email: String(v.email),
        organizationId: String(v.org),
        firstName: v['first-name'] as string | undefined,
        lastName: v['last-name'] as string | undefined,
        level,
        currentProjectId: first?.id,
      });
      return { id: user.id, email: user.email, distinct_id: user.distinctId };
    },
  },
  'user list': {
    usage: '',
    options: {},
    run: (em) =>
      db(em)
        .selectFrom('app_user as u')
        .select((eb) => [
          'u.id',
          'u.email',
          'u.is_active as active',
          eb
            .selectFrom('personal_api_key as k')
            .select((k) => k.cast<number>(k.fn.countAll(), 'integer').as('n'))
            .whereRef('k.user_id', '=', 'u.id')
            .as('keys'),
          sql<string[]>`array${eb
            .selectFrom('organization_membership as m')
            .select((m) => m.cast<string>('m.organization_id', 'text').as('id'))
            .whereRef('m.user_id', '=', 'u.id')
            .orderBy('m.organization_id')}`.as('organizations'),
        ])
        .orderBy('u.id')
        .execute(),
  },
  'user deactivate': userActiveCommand(false),
  'user activate': userActiveCommand(true),
  'key create': {
    usage: '--user EMAIL --label LABEL --scopes "person:read,experiment:write"|"*" [--projects 1,2] [--orgs ORG_ID,…]',
    options: { ...text('user'), ...text('label'), ...text('scopes'), ...text('projects'), ...text('orgs') },
    required: ['user', 'label', 'scopes'],
    run: async (em, v) => {
      const user = await userByEmail(em, String(v.user));
      const scopes = list(v.scopes);
      if (scopes.length === 0) throw new AccountError('scopes: This field is required.');
      const teams = projectIds(v.projects);
      const orgs = list(v.orgs);
      const { key, value } = await createPersonalApiKey(em, {
        userId: user.id,
        label: String(v.label),
        scopes,
        scopedTeams: teams.length ? teams : null,
        scopedOrganizations: orgs.length ? orgs : null,
      });
      return { id: key.id, label: key.label, scopes, scoped_teams: teams, scoped_organizations: orgs, value };
    },
  },
  'key list': {
    usage: '[--user EMAIL]',
    options: text('user'),
    run: async (em, v) => {
      const userId = v.user ? (await userByEmail(em, String(v.user))).id : null;
      const keys = db(em)
        .selectFrom('personal_api_key as k')
        .innerJoin('app_user as u', 'u.id', 'k.user_id')
        .select((eb) => [
          'k.id',
          'u.email as user',
          'k.label',
          'k.mask_value',
          eb.fn.coalesce('k.scopes', eb.val(['*'])).as('scopes'),
          eb.fn.coalesce('k.scoped_teams', eb.val<number[]>([])).as('projects'),
          eb.fn.coalesce('k.scoped_organizations', eb.val<string[]>([])).as('organizations'),
          'k.created_at',
          'k.last_used_at',
          'k.last_rolled_at',
        ])
        .orderBy('k.created_at')
        .orderBy('k.id');
      return withTimes(await (userId === null ? keys : keys.where('k.user_id', '=', userId)).execute(), [
        'created_at',
        'last_used_at',
        'last_rolled_at',
      ]);
    },
  },
  'key roll': {
    usage: '--key KEY_ID',
    options: text('key'),
    required: ['key'],
    run: async (em, v) => ({ id: v.key, value: await rollPersonalApiKey(em, String(v.key)) }),
  },
  'deletion list': {
    // The words and the order of /admin/deletions: the API's statuses, open (not done) and all.
    usage: `[--project PROJECT_ID] [--status ${OPERATOR_DELETION_FILTERS.join('|')}] [--limit 100]   (default all)`,
    options: { ...text('project'), ...text('status'), ...text('limit') },
    run: async (em, v) => {
      const status = String(v.status ?? 'all') as OperatorDeletionFilter;
      if (!OPERATOR_DELETION_FILTERS.includes(status))
        throw new AccountError(`Invalid status: ${status} (one of ${OPERATOR_DELETION_FILTERS.join(', ')})`);
      const limit = Number(v.limit ?? 100);
      if (!Number.isInteger(limit) || limit < 1 || limit > 10_000) throw new AccountError(`Invalid limit: ${v.limit}`);
      const projectId = v.project === undefined ? null : projectIds(v.project)[0];
      const { results } = await listOperatorDeletionRequests(em, { projectId, status, limit });
      return results.map((r) => ({
        id: r.id,
        project: r.project_id,
        person: r.person_uuid,
        type: r.deletion_type,
        mode: r.mode,
        status: r.status,
        created_at: r.created_at,
        attempts: r.attempts,
        failures: r.failures,
        next_attempt_at: r.next_attempt_at,
        last_error: r.last_error,
      }));
    },
  },
  'deletion show': {
    usage:
      '--id DELETION_ID [--project PROJECT_ID]   (the request as deletion_status shows it, and its signed receipt once verified)',
    options: { ...text('id'), ...text('project') },
    required: ['id'],
    run: async (em, v) => {
      const id = String(v.id);
      if (!isBigintId(id)) throw new AccountError(`Invalid deletion id: ${id}`);
      const projectId = v.project === undefined ? null : projectIds(v.project)[0];
      const [request] = await deletionRequestsByIds(em, [id]);
      if (!request || (projectId !== null && request.project_id !== projectId))
        throw new AccountError(`No deletion request ${id}${projectId === null ? '' : ` in project ${projectId}`}`);
      return { request, receipt: await deletionReceipt(em, request.project_id, id) };
    },
  },
  'deletion retry': {
    usage: '--id DELETION_ID',
    options: text('id'),
    required: ['id'],
    run: async (em, v) => {
      const id = String(v.id);
      if (!isBigintId(id)) throw new AccountError(`Invalid deletion id: ${id}`);
      const result = await withProducers((queues) => retryDeletion(em, null, id, queues.deletions));
      if (result === 'not_found') throw new AccountError(`No deletion request ${id}`);
      if (result === 'not_failed')
        throw new AccountError(`Deletion request ${id} has not failed; only a failed request can be retried`);
      return {
        id,
        status: result.request.status,
        failures: result.request.failures,
        worker: result.handedToWorker ? 'queued' : REDIS_AWAY,
      };
    },
  },
  'deletion cancel': {
    usage: '--id DELETION_ID [--project PROJECT_ID]   (only while pending: no worker has claimed it)',
    options: { ...text('id'), ...text('project') },
    required: ['id'],
    run: async (em, v) => {
      const id = String(v.id);
      if (!isBigintId(id)) throw new AccountError(`Invalid deletion id: ${id}`);
      const projectId = v.project === undefined ? null : projectIds(v.project)[0];
      const result = await cancelDeletion(em, { projectId, userId: null }, id, null);
      if (!result)
        throw new AccountError(`No deletion request ${id}${projectId === null ? '' : ` in project ${projectId}`}`);
      if (result.outcome === 'too_late')
        throw new AccountError(
          `Deletion request ${id} is ${result.request.status}; only a pending request can be cancelled`,
        );
      const r = result.request;
      return {
        id,
        project: r.project_id,
        person: r.person_uuid,
        type: r.deletion_type,
        status: r.status,
        cancelled_at: r.cancelled_at,
      };
    },
  },
  'deletion run-window': {
    usage: '--mode weekly|off_peak',
    options: text('mode'),
    required: ['mode'],
    run: async (em, v) => {
      const mode = String(v.mode);
      if (mode !== 'weekly' && mode !== 'off_peak')
        throw new AccountError(`Invalid mode: ${mode} (weekly or off_peak)`);
      const ids = await releaseDeletions(em, mode, null);
      return {
        mode,
        released: ids.length,
        worker: ids.length ? await handToWorker((q) => enqueueDeletions(q, ids)) : 'nothing to do',
      };
    },
  },
  'property index': {
    usage: '--key PROPERTY [--kind number|text|date|all]   (builds without blocking writes; may take minutes)',
    options: { ...text('key'), ...text('kind') },
    required: ['key'],
    run: async (em, v, io) => {
      const kind = String(v.kind ?? 'all');
      const kinds = kind === 'all' ? PROPERTY_INDEX_KINDS : PROPERTY_INDEX_KINDS.filter((k) => k === kind);
      if (!kinds.length) throw new AccountError(`Invalid kind: ${kind} (${PROPERTY_INDEX_KINDS.join(', ')} or all)`);
      // A build on a large table takes minutes: its progress goes to stderr every few seconds.
      const progress = setInterval(async () => {
        for (const build of await personIndexBuilds(em.fork()).catch(() => [])) {
          const share =
            build.total > 0 ? ` ${Math.floor((100 * build.done) / build.total)}% (${build.done}/${build.total})` : '';
          io.err(`${build.index || 'index'}: ${build.phase}${share}`);
        }
      }, PROGRESS_EVERY_MS);
      try {
        return await indexPersonProperty(em, propertyKey(v.key), kinds);
      } finally {
        clearInterval(progress);
      }
    },
  },
  'property unindex': {
    usage: '--key PROPERTY',
    options: text('key'),
    required: ['key'],
    run: async (em, v) => {
      const key = propertyKey(v.key);
      const dropped = await dropPersonPropertyIndexes(em, key);
      // A typo must not look like success.
      if (dropped.length === 0) throw new AccountError(`No index on person property ${key} (see \`property indexes\`)`);
      return { dropped };
    },
  },
  'property indexes': {
    usage: '',
    options: {},
    run: (em) => personPropertyIndexes(em),
  },
  'events backfill': {
    usage:
      '[--project ID] [--batch-size N]   (EVENT_STORE=clickhouse: copies the events PostgreSQL holds to ClickHouse; resumable)',
    options: { ...text('project'), ...text('batch-size') },
    run: (em, v, io) => backfillCommand(em, v, io),
  },
  'tracking-plan diff': {
    usage:
      "FILE --project PROJECT_ID   (what the plan in FILE would change, and the last 7 days' events it would find violating)",
    options: text('project'),
    required: ['project'],
    positional: 'file',
    run: async (em, v) => {
      const [projectId] = projectIds(v.project);
      const document = planFile(v.file);
      const orm = await initOrm();
      try {
        return await planInput(() => diffPlan(em, createEventStore(config, orm), projectId, document));
      } finally {
        await orm.close();
      }
    },
  },
  'tracking-plan apply': {
    usage:
      "FILE --project PROJECT_ID   (the plan in FILE becomes the project's next version, on every API process within seconds)",
    options: text('project'),
    required: ['project'],
    positional: 'file',
    run: async (em, v) => {
      const [projectId] = projectIds(v.project);
      const row = await planInput(() => putPlan(em, projectId, null, planFile(v.file)));
      return { project: projectId, version: row.version, created_at: isoTimestamp(row.created_at) };
    },
  },
  'queue status': {
    usage: '',
    options: {},
    needs: 'redis',
    run: () => queueStatus(),
  },
  'migration status': {
    usage: '',
    options: {},
    needs: 'database',
    run: () => migrationState(config.databaseUrl),
  },
  'schedule list': {
    usage: '',
    options: {},
    run: async (em) => {
      const { schedules } = await recordedSchedules(em, defaultSchedules(config));
      return schedules.map((s) => ({
        id: s.schedulerId,
        cron: s.pattern,
        next_run: nextRun(s.pattern).toISOString(),
        queue: QUEUE_NAMES[JOBS[s.job].queue],
        job: JOBS[s.job].name,
        setting: s.setting,
      }));
    },
  },
  'schedule set': {
    usage: '--id SCHEDULE_ID --cron "0 5 * * 0"',
    options: { ...text('id'), ...text('cron') },
    required: ['id', 'cron'],
    run: async (em, v) => {
      try {
        await setSchedule(em, String(v.id), String(v.cron), defaultSchedules(config));
      } catch (error) {
        throw new AccountError((error as Error).message);
      }
      return { id: v.id, cron: v.cron, applied: `by every worker within ${config.deletion.reconcileSeconds} s` };
    },
  },
  'key revoke': {
    usage: '--key KEY_ID',
    options: text('key'),
    required: ['key'],
    run: async (em, v) => {
      await revokePersonalApiKey(em, String(v.key));
      return { id: v.key, revoked: true };
    },
  },
};

/** A tracking plan file's JSON document. */
function planFile(path: unknown): unknown {
  let text: string;
  try {
    text = readFileSync(String(path), 'utf8');
  } catch (error) {
    throw new AccountError(`Cannot read ${String(path)}: ${(error as Error).message}`);
  }
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new AccountError(`${String(path)} is not JSON: ${(error as Error).message}`);
  }
}

/** A plan refused (its document or a schema) as the operator's error, naming where. */
async function planInput<T>(run: () => Promise<T>): Promise<T> {
  try {
    return await run();
  } catch (error) {
    if (error instanceof PlanInputError)
      throw new AccountError(`Invalid tracking plan${error.attr ? ` (${error.attr})` : ''}: ${error.message}`);
    throw error;
  }
}

/** The usage of every command, or of those of one object (`deletion`: deletion list, deletion show, …). */
function usage(object?: string): string {
  const lines = Object.entries(commands)
    .filter(([name]) => object === undefined || name.split(' ')[0] === object)
    .map(([name, c]) => `  ${name} ${c.usage}`.trimEnd());
  return [
    'Usage: npm run manage -- <command> [options] [--json]',
    '',
    ...lines,
    '',
    'help: this list; <object> --help: its commands; <command> --help: its options',
    // npm prints its "> analytics@… manage" banner on stdout; -s (--silent) leaves the JSON alone there.
    '--json: the answer as JSON on stdout; to pipe it, run `npm run -s manage -- <command> --json | jq`',
  ].join('\n');
}
const OBJECTS = new Set(Object.keys(commands).map((name) => name.split(' ')[0]));
const isHelp = (arg: string | undefined) => arg === '--help' || arg === '-h';

/** Where the command writes: its answer to `out`, errors and progress to `err` (a line each). */
export interface Output {
  out(text: string): void;
  err(text: string): void;
}
const consoleOutput: Output = { out: (text) => console.log(text), err: (text) => console.error(text) };

const isRecord = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v) && !(v instanceof Date);

function print(result: unknown, json: boolean, output: Output) {
  if (json) return output.out(JSON.stringify(result, null, 2));
  const cell = (v: unknown): string =>
    v === null || v === undefined
      ? ''
      : v instanceof Date
        ? v.toISOString()
        : Array.isArray(v)
          ? v.map((x) => (typeof x === 'object' && x !== null ? JSON.stringify(x) : cell(x))).join(',')
          : typeof v === 'object'
            ? JSON.stringify(v)
            : String(v);
  /** `key: value` lines; an object's fields indented under its key (`deletion show`: request, receipt). */
  const fields = (object: Record<string, unknown>, indent: string) => {
    for (const [k, v] of Object.entries(object)) {
      if (isRecord(v)) {
        output.out(`${indent}${k}:`);
        fields(v, `${indent}  `);
      } else output.out(`${indent}${k}: ${cell(v)}`.trimEnd());
    }
  };
  if (Array.isArray(result)) {
    if (result.length === 0) return output.out('(none)');
    const columns = Object.keys(result[0]);
    const rows = [columns, ...result.map((row) => columns.map((c) => cell(row[c])))];
    const widths = columns.map((_, i) => Math.max(...rows.map((r) => r[i].length)));
    for (const r of rows)
      output.out(
        r
          .map((v, i) => v.padEnd(widths[i]))
          .join('  ')
          .trimEnd(),
      );
  } else fields(result as Record<string, unknown>, '');
}

/**
 * Runs one command line and returns its exit code (0, 1 for a failure, 2 for a usage error). The
 * tests call it in their own process with their own `output`; `npm run manage` runs it with the console.
 */
export async function main(argv: string[], output: Output = consoleOutput): Promise<number> {
  if (['help', '--help', '-h'].includes(argv[0])) {
    output.out(usage(OBJECTS.has(argv[1]) ? argv[1] : undefined));
    return 0;
  }
  if (OBJECTS.has(argv[0]) && (argv.length === 1 || isHelp(argv[1]))) {
    // `deletion --help`: that object's commands; `deletion` alone is a malformed command.
    if (argv.length > 1) output.out(usage(argv[0]));
    else output.err(usage(argv[0]));
    return argv.length > 1 ? 0 : 2;
  }
  const name = argv.slice(0, 2).join(' ');
  const command = commands[name];
  if (!command) {
    output.err(argv.length && !argv[0].startsWith('-') ? `Unknown command: ${name}\n\n${usage()}` : usage());
    return 2;
  }
  const commandUsage = `Usage: npm run manage -- ${name} ${command.usage}`.trimEnd();
  let values: Values;
  try {
    const options = {
      ...command.options,
      json: { type: 'boolean' as const },
      help: { type: 'boolean' as const, short: 'h' },
    };
    const parsed = parseArgs({ args: argv.slice(2), options, strict: true, allowPositionals: !!command.positional });
    values = parsed.values as Values;
    if (command.positional) {
      if (parsed.positionals.length !== 1) throw new UsageError(`${command.positional.toUpperCase()} is required`);
      values[command.positional] = parsed.positionals[0];
    }
    if (values.help) {
      output.out(commandUsage);
      return 0;
    }
    for (const option of command.required ?? []) if (!values[option]) throw new UsageError(`--${option} is required`);
  } catch (error) {
    output.err(`${(error as Error).message}\n\n${commandUsage}`);
    return 2;
  }
  let orm: Awaited<ReturnType<typeof initOrm>> | null = null;
  try {
    if (opensItsOwn(command)) print(await command.run(values), values.json === true, output);
    else {
      const pending = (await migrationState(config.databaseUrl)).filter((m) => m.status === 'pending');
      const database = decodeURIComponent(new URL(config.databaseUrl).pathname.slice(1));
      if (pending.length)
        throw new OperatorError(
          `database "${database}" is not migrated (${pending.length} pending migrations); run \`npm run migrate\``,
        );
      orm = await initOrm();
      print(await command.run(orm.em.fork(), values, output), values.json === true, output);
    }
    return 0;
  } catch (error) {
    // Whatever went wrong, the operator gets one line: bad input, a service away, a database to migrate.
    const known = error instanceof AccountError || error instanceof OperatorError;
    output.err(`Error: ${known ? (error as Error).message : describeFailure(error)}`);
    return 1;
  } finally {
    await orm?.close().catch(() => undefined);
  }
}

/** An unexpected failure, such as PostgreSQL going away mid-command, in one line. */
function describeFailure(error: unknown): string {
  const code = (error as { code?: string })?.code;
  if (code && /^(ECONNREFUSED|ECONNRESET|ETIMEDOUT|ENOTFOUND|EHOSTUNREACH|57P0[1-3]|08\w{3})$/.test(code))
    return `lost PostgreSQL at ${where(config.databaseUrl)} (${reason(error)})`;
  return reason(error);
}

// Run as a program (`node scripts/manage.ts`, also through a symbolic link: Node names a module by its
// real path), not when imported.
if (process.argv[1] && realpathSync(process.argv[1]) === fileURLToPath(import.meta.url))
  process.exitCode = await main(process.argv.slice(2));
