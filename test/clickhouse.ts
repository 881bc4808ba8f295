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
import { CHDB_DIRECTORY_PREFIX } from './chdb-directories.ts';

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
