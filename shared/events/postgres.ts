// The PostgreSQL event store: the monthly-partitioned `event` table (the default engine). Analytics
// statements are in analytics.ts and writes in store.ts; deleting a person's events is here.
import type { EntityManager, MikroORM } from '@mikro-orm/postgresql';
import { namedStatement, pgArray, rows, run } from '../platform/db/sql.ts';
import {
  experimentEvents,
  funnelCorrelationPersonIds,
  hasExperimentEvents,
  funnelPersonIds,
  lifecyclePersonIds,
  propertiesTimelineEvents,
} from './analytics.ts';
import { propertyFiltersSql } from '../platform/db/property-filters.ts';
import type {
  DeletedKeyCount,
  DeletionHooks,
  EventDeletionGroup,
  EventStore,
  PersonEventCount,
} from './event-store.ts';
import { countPostgresExportEvents, exportPostgresEvents } from './export.ts';
import { deleteProjectEventsBefore } from './partitions.ts';
import { countScrubEvents, scrubPostgresEvents } from './scrub.ts';
import { firstMonthlyPartitionStart, recentEventsCarryFlagValues, storeEvents } from './store.ts';

export interface PostgresEventStoreOptions {
  /** Rows a delete statement aims at (DELETION_CHUNK_SIZE). */
  deleteChunk: number;
  /** Events an experiment's read takes in one part (experimentEvents); default EXPERIMENT_READ_PART. */
  experimentPart?: number;
}

export function createPostgresEventStore(orm: MikroORM, options: PostgresEventStoreOptions): EventStore {
  const fork = () => orm.em.fork();
  return {
    engine: 'postgres',
    insert: async (events) => {
      await storeEvents(fork(), events);
    },
    funnelPersonIds: (projectId, params, step, page) => funnelPersonIds(fork(), projectId, params, step, page),
    funnelCorrelationPersonIds: (projectId, params, entity, converted, page) =>
      funnelCorrelationPersonIds(fork(), projectId, params, entity, converted, page),
    lifecyclePersonIds: (projectId, lifecycle, page) => lifecyclePersonIds(fork(), projectId, lifecycle, page),
    // The driver gives timestamps as text here: as Dates, the way the API reads them (isoTimestamp).
    personEvents: async (projectId, personId, to, limit) =>
      (await propertiesTimelineEvents(fork(), projectId, personId, to, limit)).map((e) => ({
        ...e,
        timestamp: new Date(e.timestamp),
      })),
    experimentEvents: (projectId, filter, properties) =>
      experimentEvents(fork, projectId, filter, properties, options.experimentPart),
    hasExperimentEvents: (projectId, filter, arrivedSince) =>
      hasExperimentEvents(fork(), projectId, filter, arrivedSince),
    scrubEventCounts: async (projectId, match) => ({ postgres: await countScrubEvents(fork(), projectId, match) }),
    scrubEvents: async (projectId, match, action, hooks) => ({
      postgres: await scrubPostgresEvents(fork(), projectId, match, action, options.deleteChunk, hooks),
    }),
    deleteEventsBefore: (projectId, before, deletion) =>
      deleteProjectEventsBefore(fork(), projectId, before, deletion.chunk, deletion.onDeleted),
    async deletePersonEvents(projectId, groups, hooks) {
      const em = fork();
      const monthsStart = await firstMonthlyPartitionStart(em);
      let deleted = 0;
      for (const group of groups)
        deleted += await deleteGroupEvents(em, projectId, group, monthsStart, options.deleteChunk, hooks);
      return deleted;
    },
    // One bitmap scan visits each heap page of the deleted rows once; probing each person's and
    // distinct id's index range instead visits every dead entry and its heap tuple: two to three
    // times slower (470–620 ms against 150–280 ms after deleting 500,000 rows).
    survivorsStatement: namedStatement(
      `select count(*)::int as n from (select 1 from event where ${GROUP_EVENTS} limit ?) x`,
      ['project_id', 'person_uuids', 'distinct_ids', 'cutoff', 'cutoff', 'limit'],
    ),
    async countPersonEvents(projectId, groups, limit = 1000) {
      let survivors = 0;
      for (const group of groups) {
        const [row] = await rows<{ n: number }>(
          fork(),
          `select count(*)::int as n from (select 1 from event where ${GROUP_EVENTS} limit ?) x`,
          [...groupEventParams(projectId, group), limit],
        );
        survivors += row.n;
      }
      return survivors;
    },
    async performedEventPersonIds(projectId, query, among) {
      const filter = propertyFiltersSql(query.eventFilters ?? [], 'e.properties');
      const found = await rows<{ id: string }>(
        fork(),
        `select d.person_id::text as id from event e
           join person_distinct_id d on d.project_id = e.project_id and d.distinct_id = e.distinct_id
          where e.project_id = ? and e.event = ? and e.timestamp >= ?::timestamptz and ${filter.sql}
            ${among === undefined ? '' : 'and d.person_id = any(?::bigint[])'}
          group by d.person_id having count(*) >= ? order by d.person_id`,
        [
          projectId,
          query.event,
          query.since.toISOString(),
          ...filter.params,
          ...(among === undefined ? [] : [pgArray(among)]),
          query.times,
        ],
      );
      return found.map((r) => r.id);
    },
    // One grouped scan with the deletes' own index conditions, rather than a count per person.
    personEventCounts: (projectId, group) =>
      rows<PersonEventCount>(
        fork(),
        `select person_id::text as "personId", distinct_id as "distinctId", count(*)::int as n from event
          where ${GROUP_EVENTS} group by 1, 2`,
        groupEventParams(projectId, group),
      ),
    recentEventsCarryFlagValues: (projectId, events) => recentEventsCarryFlagValues(fork(), projectId, events),
    exportPersonEvents: async (projectId, group, write) => ({
      postgres: await exportPostgresEvents(fork(), projectId, group, write),
    }),
    countExportEvents: async (projectId, group) => ({
      postgres: await countPostgresExportEvents(fork(), projectId, group),
    }),
    async countEventsBefore(projectId, before) {
      const [row] = await rows<{ n: number }>(
        fork(),
        `select count(*)::float8 as n from event where project_id = ? and timestamp < ?`,
        [projectId, before],
      );
      return Number(row.n);
    },
    async countEvents(projectId, event) {
      const [row] = await rows<{ n: number }>(
        fork(),
        `select count(*)::int as n from event where project_id = ? ${event === undefined ? '' : 'and event = ?'}`,
        event === undefined ? [projectId] : [projectId, event],
      );
      return row.n;
    },
    async recentEventSample(projectId, since, limit) {
      const [row] = await rows<{ n: number }>(
        fork(),
        `select count(*)::float8 as n from event where project_id = ? and timestamp >= ?`,
        [projectId, since],
      );
      const events =
        limit > 0
          ? await rows<{ event: string; properties: Record<string, unknown> }>(
              fork(),
              `select event, properties from event where project_id = ? and timestamp >= ?
                order by timestamp desc limit ?`,
              [projectId, since, limit],
            )
          : [];
      return { total: Number(row.n), events };
    },
    ping: async () => undefined,
    close: async () => undefined,
  };
}

// A group's events: rows recorded under one of its persons' uuids, or under one of the distinct ids
// they had when the request was made — and only what existed then (timestamp and created_at up to the
// cutoff). Both conditions are index conditions ((project_id, person_id, timestamp) and
// (project_id, distinct_id, timestamp)), so a time window of them is one bitmap scan. The arrays are
// sub-selects so the planner does not estimate each of their thousand elements in every partition
// (about 6–10 ms of planning per statement); the plan is the same.
export const GROUP_EVENTS = `project_id = ? and (person_id = any((select ?::uuid[])::uuid[]) or distinct_id = any((select ?::text[])::text[])) and timestamp <= ?::timestamptz and created_at <= ?::timestamptz`;
export const groupEventParams = (projectId: number, g: EventDeletionGroup) => [
  projectId,
  pgArray(g.personIds),
  pgArray(g.distinctIds),
  g.cutoff,
  g.cutoff,
];

/**
 * Where the group's events up to the cutoff begin and end, in epoch milliseconds (lo null: none):
 * one index probe per person and distinct id. Rows older than the first monthly partition
 * (`monthsStart`) can only be in the default partition, and are older than any in the monthly ones;
 * so each key first probes those alone, and only if there are none the months from the first to the
 * cutoff, which PostgreSQL reads in time order, stopping at the first that holds the key. (One probe
 * of the whole table would descend into every partition for every key: the default partition keeps
 * the planner from reading partitions in order.) Both bounds are constants, so pruning is at plan time.
 */
async function oldestEventBounds(
  em: EntityManager,
  projectId: number,
  g: EventDeletionGroup,
  monthsStart: string | null,
): Promise<{ lo: number | null; hi: number }> {
  const oldest = (column: 'person_id' | 'distinct_id') =>
    `coalesce((select timestamp from event where project_id = ? and ${column} = k and timestamp < ?::timestamptz and timestamp <= ?::timestamptz order by timestamp limit 1),
              (select timestamp from event where project_id = ? and ${column} = k and timestamp >= ?::timestamptz and timestamp <= ?::timestamptz order by timestamp limit 1))`;
  // Without monthly partitions every row is in the default partition: the first probe takes them all.
  const start = monthsStart ?? 'infinity';
  const probes = [projectId, start, g.cutoff, projectId, start, g.cutoff];
  const [bounds] = await rows<{ lo: number | null; hi: number }>(
    em,
    `select floor(extract(epoch from min(oldest)) * 1000)::float8 - 1 as lo, ceil(extract(epoch from ?::timestamptz) * 1000)::float8 + 1 as hi from (
       select ${oldest('person_id')} as oldest from unnest(?::uuid[]) k
       union all
       select ${oldest('distinct_id')} from unnest(?::text[]) k) x`,
    [g.cutoff, ...probes, pgArray(g.personIds), ...probes, pgArray(g.distinctIds)],
  );
  return { lo: bounds.lo === null ? null : Number(bounds.lo), hi: Number(bounds.hi) };
}

/**
 * Deletes a group's events window by window in event time, oldest first. Each window's size adapts
 * so a statement deletes about `chunk` rows (short statements, the API stays responsive). The rows
 * are counted (hooks.record) in the delete's transaction, so a worker killed at any point leaves the
 * count matching what is gone.
 */
async function deleteGroupEvents(
  em: EntityManager,
  projectId: number,
  g: EventDeletionGroup,
  monthsStart: string | null,
  chunk: number,
  hooks: DeletionHooks,
): Promise<number> {
  const { lo, hi } = await oldestEventBounds(em, projectId, g, monthsStart);
  if (lo === null) return 0;
  let total = 0;
  // Each window costs an index descent per person and distinct id whatever its size, so start wide
  // (a sixteenth of the span) and let the row counts narrow it.
  let span = Math.max(1000, Math.floor((hi - lo) / 16));
  for (let from = lo; from < hi; ) {
    const to = Math.min(from + span, hi);
    const window = `${GROUP_EVENTS} and timestamp >= to_timestamp(?::float8 / 1000) and timestamp < to_timestamp(?::float8 / 1000)`;
    const params = [...groupEventParams(projectId, g), from, to];
    const n = await em.transactional(async (tx) => {
      // No WAL flush wait per window (~10 ms each here). Safe: a crash loses only a suffix of the WAL,
      // so the request's completion (delete_verified_at, committed synchronously) is never durable
      // without these deletes; a window lost with its rows_deleted is redone by the retry.
      await run(tx, `set local synchronous_commit = off`, []);
      if (!hooks.recordKeys) {
        const deleted = await run(tx, `delete from event where ${window}`, params);
        await hooks.record(deleted, tx);
        return deleted;
      }
      // The deleted rows counted by key in the statement itself (a receipt's count before).
      const counts = await rows<DeletedKeyCount>(tx, deleteCountingKeys(window), params);
      const deleted = counts.reduce((sum, c) => sum + c.n, 0);
      await hooks.recordKeys(counts, tx, g);
      await hooks.record(deleted, tx);
      return deleted;
    });
    total += n;
    await hooks.done({ deleted: n, fromMs: from, toMs: to });
    // Aim the next window at `chunk` rows, changing its length at most eightfold per step.
    span = Math.max(1, Math.floor(n === 0 ? span * 8 : Math.min(span * 8, Math.max(span / 8, (span * chunk) / n))));
    from = to;
  }
  return total;
}

/**
 * A window's delete, with its rows counted by (person uuid, distinct id): what a deletion receipt
 * counts as found before. An aggregate over the delete's own `returning`: one bitmap of the window's
 * index entries serves both, and the count is exactly the rows this statement removed. Grouped by the
 * columns themselves, the uuid made text once per group after, not once per row (that cast alone was
 * about a tenth of the statement). Tried and measured slower or no faster (EXPLAIN ANALYZE of a window of
 * 43,000 rows of 1000 persons among 5M events, and bench/deletion.ts):
 * a count before the delete in the same snapshot, or beside it on a second connection from the
 * delete's exported snapshot (each reads the window's index entries and rows a second time; beside it,
 * it is free only while a core is idle, and a second connection held across the delete can exhaust
 * the pool); a DELETE per request in a server-side loop, to use each statement's row count (about
 * 2.5 times as long: a statement per request and window, each visiting its rows' pages on its own).
 */
const deleteCountingKeys = (window: string) =>
  `with d as (delete from event where ${window} returning person_id, distinct_id),
        g as (select person_id, distinct_id, count(*)::int as n from d group by person_id, distinct_id)
   select person_id::text as "personId", distinct_id as "distinctId", n from g`;
