// The one place an event store is built from configuration (EVENT_STORE).
import { createClient } from '@clickhouse/client';
import type { MikroORM } from '@mikro-orm/postgresql';
import type { Config } from '../config.ts';
import { createClickHouseEventStore, type ClickHouseEventStore } from './clickhouse.ts';
import type { EventStore } from './event-store.ts';
import { createPostgresEventStore } from './postgres.ts';

/**
 * The store the API and worker use. With EVENT_STORE=clickhouse, capture still writes PostgreSQL
 * (the source the shipper copies from), ClickHouse answers analytics, and a deletion removes the
 * events from both (PostgreSQL first, then ClickHouse in one statement per batch).
 */
export function createEventStore(config: Config, orm: MikroORM): EventStore {
  const postgres = createPostgresEventStore(orm, { deleteChunk: config.deletion.chunkSize });
  if (config.events.engine === 'postgres') return postgres;
  const clickhouse = createClickHouseEventStore(
    createClient({ url: config.events.clickhouseUrl }),
    config.events.clickhouseDatabase,
    orm,
  );
  return withPostgresSource(postgres, clickhouse);
}

/** ClickHouse for reads and inserts; deletions and their verification cover PostgreSQL too. */
export function withPostgresSource(postgres: EventStore, clickhouse: ClickHouseEventStore): ClickHouseEventStore {
  return {
    ...clickhouse,
    // The request counts the events once: as PostgreSQL deletes them (the copies ClickHouse drops
    // are the same events). A copy shipped while the deletion ran is a survivor, and the retry takes it.
    async deletePersonEvents(projectId, groups, hooks) {
      const deleted = await postgres.deletePersonEvents(projectId, groups, hooks);
      await clickhouse.deletePersonEvents(projectId, groups, {
        record: async () => undefined,
        done: (window) => hooks.done({ ...window, deleted: 0 }),
      });
      return deleted;
    },
    // Retention counts PostgreSQL's rows (as the deletion does), then drops ClickHouse's copies.
    async deleteEventsBefore(projectId, before, deletion) {
      const deleted = await postgres.deleteEventsBefore(projectId, before, deletion);
      await clickhouse.deleteEventsBefore(projectId, before, { chunk: deletion.chunk });
      return deleted;
    },
    // Counts of what a deletion covers are the source's, as the deletion counts what PostgreSQL
    // deletes (an event not shipped yet is covered too); retention counts PostgreSQL's rows.
    personEventCounts: (projectId, group) => postgres.personEventCounts(projectId, group),
    countEventsBefore: (projectId, before) => postgres.countEventsBefore(projectId, before),
    async countPersonEvents(projectId, groups, limit) {
      return (
        (await postgres.countPersonEvents(projectId, groups, limit)) +
        (await clickhouse.countPersonEvents(projectId, groups, limit))
      );
    },
  };
}
