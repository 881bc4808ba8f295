// The ClickHouse engine in-process (chDB) behind the official client, for the event store's tests.
// libchdb binds one data directory per process, and test files share their worker process
// (isolate: false), so every file of a process gets the same client and directory; files keep apart
// by each using a database of its own.
import { createClient, type ClickHouseClient, type ClickHouseClientConfigOptions } from '@clickhouse/client';
import { createChdbConnection } from 'chdb/connection';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import type { MikroORM } from '@mikro-orm/postgresql';
import { CHDB_DIRECTORY_PREFIX } from './chdb-directories.ts';
import { loadConfig } from '../shared/platform/config.ts';
import { initOrm } from '../shared/platform/db/orm.ts';
import { logger } from '../shared/platform/logger.ts';
import { createClickHouseEventStore } from '../shared/events/clickhouse.ts';
import { withPostgresSource } from '../shared/events/create.ts';
import { createPostgresEventStore } from '../shared/events/postgres.ts';
import type { WorkerDeps } from '../worker/deps.ts';

const KEY = Symbol.for('analytics.test.chdb');
type Holder = { [KEY]?: ClickHouseClient };

/** This process's chDB client (never closed: closing frees the directory other files of the process use). */
export function chdbClient(): ClickHouseClient {
  const holder = globalThis as Holder;
  if (!holder[KEY]) {
    // chdb/connection is typed by @clickhouse/client-common, which the client now bundles as a copy
    // of its own: the same interface, two declarations, hence the cast.
    const connection = createChdbConnection({ path: mkdtempSync(join(tmpdir(), CHDB_DIRECTORY_PREFIX)) });
    holder[KEY] = createClient({ connection: connection as unknown as ClickHouseClientConfigOptions['connection'] });
  }
  return holder[KEY];
}

/** A fresh database name for one test file. */
export function chdbDatabase(prefix = 'test'): string {
  return `${prefix}_${randomUUID().replaceAll('-', '')}`;
}

/**
 * A worker's world with EVENT_STORE=clickhouse for a test file: PostgreSQL (`databaseUrl`, or the
 * configured test database), a chDB database (`<name>_…`) migrated, the PostgreSQL store beside it (delete
 * statements of `deleteChunk` rows), and worker deps reading through both. No Redis: nothing is enqueued
 * (no webhook is subscribed in these files, so the jobs hand over no delivery).
 */
export async function clickHouseWorld(name: string, options: { databaseUrl?: string; deleteChunk?: number } = {}) {
  const config = loadConfig();
  const orm: MikroORM = await initOrm(options.databaseUrl ?? config.databaseUrl, 2);
  const ch = createClickHouseEventStore(chdbClient(), chdbDatabase(name), orm);
  await ch.migrate();
  const pg = createPostgresEventStore(orm, { deleteChunk: options.deleteChunk ?? 1000 });
  const events = withPostgresSource(pg, ch, orm);
  const deps = {
    config,
    orm,
    events,
    logger,
    connection: null,
    queues: { webhooks: null },
  } as unknown as WorkerDeps;
  return { orm, ch, pg, events, deps };
}
