// The one place an event store is built from configuration (EVENT_STORE).
import { createClient } from '@clickhouse/client';
import type { EntityManager, MikroORM } from '@mikro-orm/postgresql';
import type { Config } from '../platform/config.ts';
import { sameRanges, type TrimmedRange, trimmedRanges } from './buffer.ts';
import { createClickHouseEventStore, type ClickHouseEventStore } from './clickhouse.ts';
import type { EventStore, PersonEventCount } from './event-store.ts';
import { countPostgresExportEvents, exportPostgresEvents } from './export.ts';
import { createPostgresEventStore } from './postgres.ts';
import { withShipmentsSettled } from './shipper.ts';

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
  return withPostgresSource(postgres, clickhouse, orm);
}

/**
 * ClickHouse for reads and inserts; deletions and their verification cover PostgreSQL too. PostgreSQL
 * holds the events not shipped yet and, once shipped, those younger than EVENT_BUFFER_HOURS
 * (buffer.ts): a deletion's and retention's counts are PostgreSQL's rows plus ClickHouse's events that
 * PostgreSQL no longer holds (the trimmed ranges), so each event counts once.
 */
export function withPostgresSource(
  postgres: EventStore,
  clickhouse: ClickHouseEventStore,
  orm: { em: EntityManager },
): ClickHouseEventStore {
  const trimmed = () => trimmedRanges(orm.em.fork());
  /**
   * A count of PostgreSQL's rows with the trimmed ranges it goes with: read before and after it, and
   * taken again when a trim committed in between (its rows might be in neither count); after ten
   * tries (a trim removing a large backlog, a statement every fraction of a second) the last is kept.
   */
  async function besideTrim<T>(count: () => Promise<T>): Promise<{ value: T; ranges: TrimmedRange[] }> {
    let ranges = await trimmed();
    for (let attempt = 1; ; attempt++) {
      const value = await count();
      const after = await trimmed();
      if (sameRanges(ranges, after) || attempt === 10) return { value, ranges: after };
      ranges = after;
    }
  }
  const sumByKey = (counts: PersonEventCount[]) => {
    const byKey = new Map<string, PersonEventCount>();
    for (const c of counts) {
      const key = `${c.personId}\u0000${c.distinctId}`;
      const seen = byKey.get(key);
      byKey.set(key, seen ? { ...seen, n: seen.n + c.n } : { ...c });
    }
    return [...byKey.values()];
  };
  return {
    ...clickhouse,
    // The request counts the events once: as PostgreSQL deletes them (the copies ClickHouse drops
    // are the same events), and then those only ClickHouse holds (trimmed from PostgreSQL), counted
    // before its DELETE and recorded after it, with the ranges read before PostgreSQL's deletes (an
    // event trimmed while they run is in neither count). A copy shipped while the deletion ran is a
    // survivor, and the retry takes it.
    async deletePersonEvents(projectId, groups, hooks) {
      const ranges = await trimmed();
      const deleted = await postgres.deletePersonEvents(projectId, groups, hooks);
      const only = await Promise.all(
        // A row of two groups is the first one's, as PostgreSQL's deletes (group by group) count it.
        groups.map(async (group, i) => ({
          group,
          counts: await clickhouse.trimmedPersonEventCounts(projectId, group, ranges, groups.slice(0, i)),
        })),
      );
      await clickhouse.deletePersonEvents(projectId, groups, {
        record: async () => undefined,
        done: (window) => hooks.done({ ...window, deleted: 0 }),
      });
      const n = only.reduce((sum, g) => sum + g.counts.reduce((s, c) => s + c.n, 0), 0);
      if (n > 0)
        await orm.em.fork().transactional(async (tx) => {
          for (const { group, counts } of only) if (counts.length > 0) await hooks.recordKeys?.(counts, tx, group);
          await hooks.record(n, tx);
        });
      return deleted + n;
    },
    // Retention counts PostgreSQL's rows (as the deletion does) and ClickHouse's trimmed ones, then
    // drops ClickHouse's copies.
    async deleteEventsBefore(projectId, before, deletion) {
      const ranges = await trimmed();
      const only = await clickhouse.countTrimmedEventsBefore(projectId, before, ranges);
      const deleted = await postgres.deleteEventsBefore(projectId, before, deletion);
      await clickhouse.deleteEventsBefore(projectId, before, { chunk: deletion.chunk });
      return deleted + only;
    },
    // A scrub's counts are each store's own: PostgreSQL's rows (shipped or not) and ClickHouse's events.
    async scrubEventCounts(projectId, match) {
      const [pg, ch] = await Promise.all([
        postgres.scrubEventCounts(projectId, match),
        clickhouse.scrubEventCounts(projectId, match),
      ]);
      return { ...pg, ...ch };
    },
    // PostgreSQL first (an event not shipped yet then ships scrubbed, or not at all), then ClickHouse's
    // one statement while no batch read before PostgreSQL's changes is still on its way there.
    async scrubEvents(projectId, match, action, hooks) {
      const pg = await postgres.scrubEvents(projectId, match, action, hooks);
      const ch = await withShipmentsSettled(orm, () => clickhouse.scrubEvents(projectId, match, action, hooks));
      return { ...pg, ...ch };
    },
    // Counts of what a deletion covers are the source's (an event not shipped yet is covered too),
    // with the events trimmed from it that ClickHouse holds.
    async personEventCounts(projectId, group) {
      const { value, ranges } = await besideTrim(() => postgres.personEventCounts(projectId, group));
      return sumByKey([...value, ...(await clickhouse.trimmedPersonEventCounts(projectId, group, ranges))]);
    },
    // An export reads PostgreSQL's rows and the trimmed ranges in one snapshot (buffer.ts: in any
    // snapshot PostgreSQL holds an event exactly when the ranges do not cover it), then ClickHouse's
    // events in those ranges: each event once, whether still in the buffer, shipped, or both.
    async exportPersonEvents(projectId, group, write) {
      let ranges: TrimmedRange[] = [];
      const postgresRows = await exportPostgresEvents(orm.em, projectId, group, write, async (tx) => {
        ranges = await trimmedRanges(tx);
      });
      return {
        postgres: postgresRows,
        clickhouse: await clickhouse.trimmedExportPersonEvents(projectId, group, ranges, write),
      };
    },
    async countExportEvents(projectId, group) {
      const { value, ranges } = await besideTrim(() => countPostgresExportEvents(orm.em.fork(), projectId, group));
      return { postgres: value, clickhouse: await clickhouse.countTrimmedExportEvents(projectId, group, ranges) };
    },
    async countEventsBefore(projectId, before) {
      const { value, ranges } = await besideTrim(() => postgres.countEventsBefore(projectId, before));
      return value + (await clickhouse.countTrimmedEventsBefore(projectId, before, ranges));
    },
    async countPersonEvents(projectId, groups, limit) {
      return (
        (await postgres.countPersonEvents(projectId, groups, limit)) +
        (await clickhouse.countPersonEvents(projectId, groups, limit))
      );
    },
  };
}
