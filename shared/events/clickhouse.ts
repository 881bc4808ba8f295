// The ClickHouse event store (EVENT_STORE=clickhouse), through the official client. Events are in
// `events`; the person an event belongs to is its distinct id's person *now*, read from
// `person_distinct_id`, a mirror of PostgreSQL's table (clickhouse-mirror.ts keeps it), joined at
// query time — the same rule PostgreSQL's analytics statements follow, so a merge (alias) after the
// events were stored moves them to the surviving person in both engines, and a deleted person's
// mapping is gone from both. Persons themselves stay in PostgreSQL: ClickHouse answers with person
// ids, PostgreSQL pages them (newest person first).
import type { ClickHouseClient } from '@clickhouse/client';
import type { EntityManager } from '@mikro-orm/postgresql';
import { createHash, randomUUID } from 'node:crypto';
import { lifecycleDayBounds, personIdPageOf } from './analytics.ts';
import { type DayChangeRow, dayChangesStatement } from './clickhouse-experiment.ts';
import { clickHouseFilterSql, jsonText } from './clickhouse-filters.ts';
import { CLICKHOUSE_MIGRATIONS } from './clickhouse-schema.ts';
import type { TrimmedRange } from './buffer.ts';
import {
  type EventDeletionGroup,
  type EventRow,
  type EventScrubMatch,
  type EventStore,
  type ExperimentEventFilter,
  type ExperimentEvents,
  experimentNames,
  type FunnelParams,
  type PersonEventCount,
  type EventExportBatch,
  type EventExportGroup,
} from './event-store.ts';
import { exportLine } from './export.ts';
import { EXPERIMENT_READ_PART, inTurn, partBounds, partRange, partsFor } from './parts.ts';

/** A row of `events` as JSONEachRow takes it (timestamps as 'YYYY-MM-DD hh:mm:ss.ffffff', UTC). */
export interface ClickHouseEventRow {
  uuid: string;
  project_id: number;
  event: string;
  distinct_id: string;
  person_id: string | null;
  properties: string;
  timestamp: string;
  created_at: string;
}

/** One distinct id's person as PostgreSQL has it now (null: the mapping is gone). */
export interface DistinctIdMapping {
  projectId: number;
  distinctId: string;
  personId: string | null;
  /** The person's created_at as DateTime64's text, UTC, microseconds (null with the mapping gone). */
  personCreatedAt: string | null;
}

/** A distinct id's person in the mirror: its id and its creation (DistinctIdMapping's text). */
export interface MirroredPerson {
  personId: string;
  createdAt: string;
}

export interface ClickHouseEventStore extends EventStore {
  readonly engine: 'clickhouse';
  readonly client: ClickHouseClient;
  readonly database: string;
  /** Creates the database and applies the migrations not yet recorded; returns their names. */
  migrate(): Promise<string[]>;
  /** Inserts rows as they are; a batch sent again with the same token (default: from its uuids) is dropped. */
  insertRows(rows: ClickHouseEventRow[], dedupToken?: string): Promise<void>;
  /** The project's distinct id → person mapping as the mirror has it now. */
  distinctIdMappings(projectId: number): Promise<Map<string, MirroredPerson>>;
  /** Writes mappings to the mirror; each replaces the distinct id's earlier one. */
  mirrorDistinctIds(mappings: DistinctIdMapping[]): Promise<void>;
  /**
   * personEventCounts of the events in `ranges` only: those PostgreSQL's buffer no longer holds
   * (buffer.ts); without those of the groups in `before` (a batch's earlier groups, which count them).
   */
  trimmedPersonEventCounts(
    projectId: number,
    group: EventDeletionGroup,
    ranges: TrimmedRange[],
    before?: EventDeletionGroup[],
  ): Promise<PersonEventCount[]>;
  /** countEventsBefore of the events in `ranges` only. */
  countTrimmedEventsBefore(projectId: number, before: Date, ranges: TrimmedRange[]): Promise<number>;
  /** exportPersonEvents of the events in `ranges` only (those PostgreSQL's buffer no longer holds); returns how many. */
  trimmedExportPersonEvents(
    projectId: number,
    group: EventExportGroup,
    ranges: TrimmedRange[],
    write: (batch: EventExportBatch) => Promise<void>,
  ): Promise<number>;
  /** countExportEvents of the events in `ranges` only. */
  countTrimmedExportEvents(projectId: number, group: EventExportGroup, ranges: TrimmedRange[]): Promise<number>;
}

/**
 * The events in `ranges` (buffer.ts), as a condition on `events`' columns; its parameters are added to
 * `params`. Positions compare as PostgreSQL's: uuids by their text (byte order), not ClickHouse's UUID order.
 */
export function trimmedSql(ranges: TrimmedRange[], params: Record<string, unknown>): string {
  if (ranges.length === 0) return '0';
  const time = (name: string) => `toDateTime64({${name}:String}, 6, 'UTC')`;
  return ranges
    .map((r, i) => {
      params[`trim_c${i}`] = r.createdAt;
      params[`trim_u${i}`] = r.uuid;
      const parts = [`(created_at, toString(uuid)) <= (${time(`trim_c${i}`)}, {trim_u${i}:String})`];
      if (r.from !== null) {
        params[`trim_f${i}`] = r.from;
        parts.push(`timestamp >= ${time(`trim_f${i}`)}`);
      }
      if (r.to !== null) {
        params[`trim_t${i}`] = r.to;
        parts.push(`timestamp < ${time(`trim_t${i}`)}`);
      }
      return `(${parts.join(' AND ')})`;
    })
    .join(' OR ');
}

/** A Date as DateTime64's text, UTC. */
export const chTime = (d: Date) => d.toISOString().replace('T', ' ').replace('Z', '');

const MICROS_PER_DAY = 86_400_000_000;

export interface ClickHouseEventStoreOptions {
  /** Events an experiment's read takes in one part (experimentEvents); default EXPERIMENT_READ_PART. */
  experimentPart?: number;
}

export function createClickHouseEventStore(
  client: ClickHouseClient,
  database: string,
  /** Where persons are (the analytics read them); a command that only ships passes `{ em }`. */
  orm: { em: EntityManager },
  options: ClickHouseEventStoreOptions = {},
): ClickHouseEventStore {
  const experimentPart = options.experimentPart ?? EXPERIMENT_READ_PART;
  if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(database)) throw new Error(`invalid ClickHouse database name ${database}`);
  const db = database;
  const fork = () => orm.em.fork();

  async function select<T>(query: string, params: Record<string, unknown>): Promise<T[]> {
    const result = await client.query({ query, query_params: params, format: 'JSONEachRow' });
    return result.json<T>();
  }

  /**
   * The one Int64 column of a statement's rows, as decimal text: TabSeparated, split by line (for an
   * answer of many person ids, parsing JSONEachRow's object per row cost more than the text itself).
   */
  async function selectIds(query: string, params: Record<string, unknown>): Promise<string[]> {
    const result = await client.query({ query, query_params: params, format: 'TabSeparated' });
    const text = await result.text();
    return text === '' ? [] : text.slice(0, text.endsWith('\n') ? -1 : undefined).split('\n');
  }

  // The project's current mapping, one row per live distinct id (the highest version of each).
  const currentMapping = `SELECT distinct_id, argMax(person_id, version) AS person_id
      FROM ${db}.person_distinct_id WHERE project_id = {project:Int64}
     GROUP BY distinct_id HAVING argMax(is_deleted, version) = 0`;
  // The same with each person's creation (what decides a lifecycle bucket).
  const currentMappingCreated = `SELECT distinct_id, argMax(person_id, version) AS person_id,
         argMax(person_created_at, version) AS person_created_at
      FROM ${db}.person_distinct_id WHERE project_id = {project:Int64}
     GROUP BY distinct_id HAVING argMax(is_deleted, version) = 0`;

  /**
   * Each person's funnel level from one pass of windowFunnel over the step events in the range, by
   * PostHog's rule (every step-1 event starts an attempt; the furthest step reached in order within
   * the window of a start). Time is compared in microseconds as UInt64, so events in the same second
   * keep their order and the window ends where PostgreSQL's does; equal times order by step.
   */
  function funnelLevels(
    params: FunnelParams,
    extra: string | null = null,
  ): { sql: string; params: Record<string, unknown> } {
    const values: Record<string, unknown> = {
      names: [...new Set([...params.steps, ...(extra === null ? [] : [extra])])],
      extra: extra ?? '',
      from: params.from.toISOString(),
      to: params.to.toISOString(),
    };
    const conditions = params.steps.map((step, i) => {
      values[`s${i}`] = step;
      return `e.event = {s${i}:String}`;
    });
    const window = Math.round(Number(params.windowDays) * MICROS_PER_DAY);
    return {
      sql: `SELECT d.person_id AS person_id,
                   windowFunnel(${window})(toUInt64(toUnixTimestamp64Micro(e.timestamp)), ${conditions.join(', ')}) AS level,
                   ${extra === null ? '0' : 'countIf(e.event = {extra:String}) > 0'} AS extra
              FROM ${db}.events AS e INNER JOIN (${currentMapping}) AS d ON d.distinct_id = e.distinct_id
             WHERE e.project_id = {project:Int64} AND e.event IN {names:Array(String)}
               AND e.timestamp >= parseDateTime64BestEffort({from:String}, 6, 'UTC')
               AND e.timestamp < parseDateTime64BestEffort({to:String}, 6, 'UTC')
             GROUP BY d.person_id`,
      params: values,
    };
  }

  /**
   * One deletion batch as one predicate: a row goes when its person uuid or its distinct id is the
   * batch's and both its event time and its arrival are at or before that key's cutoff (the latest,
   * when requests of the batch share a key).
   */
  function batchPredicate(
    groups: EventDeletionGroup[],
    /** Before the parameters' names, so two predicates can share a statement. */
    prefix = '',
  ): { sql: string; params: Record<string, unknown> } {
    const persons = new Map<string, string>();
    const distinctIds = new Map<string, string>();
    const later = (a: string | undefined, b: string) => (a !== undefined && Date.parse(a) >= Date.parse(b) ? a : b);
    for (const g of groups) {
      for (const id of g.personIds) persons.set(id, later(persons.get(id), g.cutoff));
      for (const id of g.distinctIds) distinctIds.set(id, later(distinctIds.get(id), g.cutoff));
    }
    const cutoff = (keys: string, cutoffs: string, key: string) =>
      `parseDateTime64BestEffort(arrayElement({${prefix}${cutoffs}:Array(String)}, indexOf({${prefix}${keys}}, ${key})), 6, 'UTC')`;
    const byPerson = cutoff('pids:Array(Nullable(UUID))', 'pcut', 'person_id');
    const byDistinctId = cutoff('dids:Array(String)', 'dcut', 'distinct_id');
    return {
      sql: `project_id = {project:Int64} AND (
              (has({${prefix}pids:Array(Nullable(UUID))}, person_id) AND timestamp <= ${byPerson} AND created_at <= ${byPerson})
              OR (has({${prefix}dids:Array(String)}, distinct_id) AND timestamp <= ${byDistinctId} AND created_at <= ${byDistinctId}))`,
      params: {
        [`${prefix}pids`]: [...persons.keys()],
        [`${prefix}pcut`]: [...persons.values()],
        [`${prefix}dids`]: [...distinctIds.keys()],
        [`${prefix}dcut`]: [...distinctIds.values()],
      },
    };
  }

  /** A scrub's events as a condition on `events` (its parameters added to `params`; FilterError for a bad filter). */
  function scrubPredicate(projectId: number, m: EventScrubMatch, params: Record<string, unknown>): string {
    const time = (name: string) => `parseDateTime64BestEffort({${name}:String}, 6, 'UTC')`;
    Object.assign(params, {
      project: projectId,
      scrub_after: m.after.toISOString(),
      scrub_before: m.before.toISOString(),
      scrub_cutoff: m.cutoff,
    });
    const parts = [
      'project_id = {project:Int64}',
      `timestamp >= ${time('scrub_after')}`,
      `timestamp < ${time('scrub_before')}`,
      `created_at <= ${time('scrub_cutoff')}`,
    ];
    if (m.event !== null) {
      params.scrub_event = m.event;
      parts.push('event = {scrub_event:String}');
    }
    if (m.distinctIds !== null) {
      params.scrub_dids = m.distinctIds;
      parts.push('distinct_id IN {scrub_dids:Array(String)}');
    }
    if (m.keys !== undefined) {
      params.scrub_keys = m.keys;
      parts.push('arrayExists(k -> JSONHas(properties, k), {scrub_keys:Array(String)})');
    }
    parts.push(clickHouseFilterSql(m.properties ?? [], 'properties', params));
    return parts.map((p) => `(${p})`).join(' AND ');
  }

  /** The events of an experiment's filter: a WHERE over `events` and its parameters. */
  function experimentEventsWhere(
    projectId: number,
    filter: ExperimentEventFilter,
  ): { sql: string; params: Record<string, unknown> } {
    return {
      sql: `project_id = {project:Int64}
          AND timestamp >= parseDateTime64BestEffort({from:String}, 6, 'UTC')
          AND timestamp < parseDateTime64BestEffort({to:String}, 6, 'UTC')
          AND (event IN {names:Array(String)}
               OR (event = '$feature_flag_called' AND ${jsonText('properties', "'$feature_flag'")} = {flag:String}))
          ${filter.distinctIds ? 'AND distinct_id IN {dids:Array(String)}' : ''}`,
      params: {
        project: projectId,
        from: filter.from.toISOString(),
        to: filter.to.toISOString(),
        names: filter.events,
        flag: filter.flagKey,
        dids: filter.distinctIds ?? [],
      },
    };
  }

  /**
   * A deletion group's events by person uuid and distinct id (those in `ranges` only, if given, and
   * not of the groups in `before`).
   */
  async function personEventCounts(
    projectId: number,
    group: EventDeletionGroup,
    ranges: TrimmedRange[] | null,
    before: EventDeletionGroup[] = [],
  ): Promise<PersonEventCount[]> {
    if (group.personIds.length === 0 && group.distinctIds.length === 0) return [];
    if (ranges !== null && ranges.length === 0) return [];
    const where = batchPredicate([group]);
    const earlier = before.some((g) => g.personIds.length > 0 || g.distinctIds.length > 0)
      ? batchPredicate(before, 'before_')
      : null;
    const params: Record<string, unknown> = { ...where.params, ...earlier?.params, project: projectId };
    const found = await select<{ p: string | null; d: string; n: string }>(
      `SELECT toString(person_id) AS p, distinct_id AS d, uniqExact(uuid) AS n FROM ${db}.events
        WHERE ${where.sql} ${ranges === null ? '' : `AND (${trimmedSql(ranges, params)})`}
          ${earlier === null ? '' : `AND NOT (${earlier.sql})`}
        GROUP BY person_id, distinct_id`,
      params,
    );
    return found.map((r): PersonEventCount => ({ personId: r.p, distinctId: r.d, n: Number(r.n) }));
  }

  /** A project's events with a timestamp before `before` (those in `ranges` only, if given). */
  async function countEventsBefore(projectId: number, before: Date, ranges: TrimmedRange[] | null): Promise<number> {
    if (ranges !== null && ranges.length === 0) return 0;
    const params: Record<string, unknown> = { project: projectId, before: before.toISOString() };
    const [row] = await select<{ n: string }>(
      `SELECT uniqExact(uuid) AS n FROM ${db}.events
        WHERE project_id = {project:Int64} AND timestamp < parseDateTime64BestEffort({before:String}, 6, 'UTC')
          ${ranges === null ? '' : `AND (${trimmedSql(ranges, params)})`}`,
      params,
    );
    return Number(row.n);
  }

  /** An access export's rows (EventExportGroup): the persons' uuids or distinct ids, arrived by the cutoff. */
  function exportWhere(projectId: number, group: EventExportGroup, ranges: TrimmedRange[] | null) {
    const params: Record<string, unknown> = {
      project: projectId,
      pids: group.personIds,
      dids: group.distinctIds,
      cutoff: group.cutoff,
    };
    const sql = `project_id = {project:Int64}
        AND (has({pids:Array(Nullable(UUID))}, person_id) OR has({dids:Array(String)}, distinct_id))
        AND created_at <= parseDateTime64BestEffort({cutoff:String}, 6, 'UTC')
        ${ranges === null ? '' : `AND (${trimmedSql(ranges, params)})`}`;
    return { sql, params };
  }

  /** The group's events (each uuid once: a row written twice by a retried batch counts once), in batches. */
  async function exportEvents(
    projectId: number,
    group: EventExportGroup,
    ranges: TrimmedRange[] | null,
    write: (batch: EventExportBatch) => Promise<void>,
  ): Promise<number> {
    if (group.personIds.length === 0 && group.distinctIds.length === 0) return 0;
    if (ranges !== null && ranges.length === 0) return 0;
    const where = exportWhere(projectId, group, ranges);
    const result = await client.query({
      query: `SELECT toString(uuid), event, distinct_id, if(person_id IS NULL, NULL, toString(person_id)),
                     toString(timestamp), toString(created_at), properties
                FROM ${db}.events WHERE ${where.sql} LIMIT 1 BY uuid`,
      query_params: where.params,
      format: 'JSONCompactEachRow',
    });
    let n = 0;
    let batch: EventExportBatch = { lines: [], names: [] };
    type Columns = [string, string, string, string | null, string, string, string];
    for await (const chunk of result.stream<Columns>())
      for (const row of chunk) {
        const [u, e, d, p, t, c, j] = row.json();
        batch.lines.push(exportLine({ u, e, d, p, t, c, j }));
        batch.names.push(e);
        if (batch.lines.length === 5000) {
          n += batch.lines.length;
          await write(batch);
          batch = { lines: [], names: [] };
        }
      }
    if (batch.lines.length > 0) {
      n += batch.lines.length;
      await write(batch);
    }
    return n;
  }

  async function countExportEvents(projectId: number, group: EventExportGroup, ranges: TrimmedRange[] | null) {
    if (group.personIds.length === 0 && group.distinctIds.length === 0) return 0;
    if (ranges !== null && ranges.length === 0) return 0;
    const where = exportWhere(projectId, group, ranges);
    const [row] = await select<{ n: string }>(
      `SELECT uniqExact(uuid) AS n FROM ${db}.events WHERE ${where.sql}`,
      where.params,
    );
    return Number(row.n);
  }

  const store: ClickHouseEventStore = {
    engine: 'clickhouse',
    client,
    database,

    async migrate() {
      await client.command({ query: `CREATE DATABASE IF NOT EXISTS ${db}` });
      await client.command({
        query: `CREATE TABLE IF NOT EXISTS ${db}.schema_migrations (name String, applied_at DateTime64(3, 'UTC') DEFAULT now64(3))
                ENGINE = ReplacingMergeTree ORDER BY name`,
      });
      const done = new Set(
        (await select<{ name: string }>(`SELECT name FROM ${db}.schema_migrations`, {})).map((r) => r.name),
      );
      const applied: string[] = [];
      for (const migration of CLICKHOUSE_MIGRATIONS) {
        if (done.has(migration.name)) continue;
        for (const statement of migration.statements(db)) await client.command({ query: statement });
        await client.insert({
          table: `${db}.schema_migrations`,
          values: [{ name: migration.name }],
          format: 'JSONEachRow',
        });
        applied.push(migration.name);
      }
      return applied;
    },

    async insertRows(rows, dedupToken) {
      if (rows.length === 0) return;
      // Always a token (by default the rows' uuids): the same batch sent again is dropped. (chDB's
      // connection also keeps a setting for the inserts after it, so an insert without a token of its
      // own would reuse the last one and be dropped as that batch's duplicate.)
      const token =
        dedupToken ??
        createHash('sha256')
          .update(rows.map((r) => r.uuid).join(','))
          .digest('hex');
      await client.insert({
        table: `${db}.events`,
        values: rows,
        format: 'JSONEachRow',
        clickhouse_settings: { insert_deduplication_token: token },
      });
    },

    insert(events) {
      const now = chTime(new Date());
      return store.insertRows(
        events.map((e: EventRow) => ({
          uuid: e.uuid,
          project_id: e.projectId,
          event: e.event,
          distinct_id: e.distinctId,
          person_id: e.personId,
          properties: JSON.stringify(e.properties),
          timestamp: chTime(e.timestamp),
          created_at: now,
        })),
      );
    },

    async funnelPersonIds(projectId, params, step, page) {
      const k = Math.abs(step);
      const levels = funnelLevels(params);
      const found = await selectIds(
        `SELECT person_id FROM (${levels.sql}) WHERE ${step > 0 ? 'level >= {k:UInt32}' : 'level = {k:UInt32} - 1'}`,
        { ...levels.params, project: projectId, k },
      );
      return personIdPageOf(fork(), projectId, found, page);
    },

    async funnelCorrelationPersonIds(projectId, params, entity, converted, page) {
      const n = params.steps.length;
      const levels = funnelLevels(params, entity);
      const found = await selectIds(
        `SELECT person_id FROM (${levels.sql})
          WHERE extra AND ${converted ? 'level = {n:UInt32}' : 'level BETWEEN 1 AND {n:UInt32} - 1'}`,
        { ...levels.params, project: projectId, n },
      );
      return personIdPageOf(fork(), projectId, found, page);
    },

    // One statement: each person active on the two days, with the creation the mirror carries,
    // put in its bucket, counted and paged newest person first (PostgreSQL gives only the days'
    // bounds in the project's time zone, so both engines split days alike).
    async lifecyclePersonIds(projectId, lifecycle, page) {
      const { before, start, end } = await lifecycleDayBounds(fork(), lifecycle);
      const { event, type } = lifecycle;
      const bucket = {
        new: 'today AND created >= {start} AND created < {end}',
        returning: 'today AND yesterday AND created < {start}',
        resurrecting: 'today AND NOT yesterday AND created < {start}',
        dormant: 'yesterday AND NOT today',
      }[type].replace(/\{(start|end)\}/g, (_, name) => `parseDateTime64BestEffort({${name}:String}, 6, 'UTC')`);
      // The page: the newest `wanted` members kept as they go by (no sort of the whole bucket), then sliced.
      // Ids as text: they are PostgreSQL's bigints, past a JS number's precision.
      const wanted = Math.max(1, Math.trunc(page.offset + page.limit));
      const [found] = await select<{ n: string; page: string[] }>(
        `SELECT count() AS n,
                arrayMap(p -> toString(-p.2),
                         arraySlice(groupArraySorted(${wanted})((-toUnixTimestamp64Micro(created), -person_id)),
                                    {first:UInt64}, {limit:UInt64})) AS page
           FROM (
             SELECT d.person_id AS person_id, max(d.person_created_at) AS created,
                    max(e.timestamp >= parseDateTime64BestEffort({start:String}, 6, 'UTC')) AS today,
                    max(e.timestamp < parseDateTime64BestEffort({start:String}, 6, 'UTC')) AS yesterday
               FROM ${db}.events AS e INNER JOIN (${currentMappingCreated}) AS d ON d.distinct_id = e.distinct_id
              WHERE e.project_id = {project:Int64} ${event === null ? '' : 'AND e.event = {event:String}'}
                AND e.timestamp >= parseDateTime64BestEffort({before:String}, 6, 'UTC')
                AND e.timestamp < parseDateTime64BestEffort({end:String}, 6, 'UTC')
              GROUP BY d.person_id)
          WHERE ${bucket}`,
        {
          project: projectId,
          event,
          before: before.toISOString(),
          start: start.toISOString(),
          end: end.toISOString(),
          first: page.offset + 1,
          limit: page.limit,
        },
      );
      return { count: Number(found.n), personIds: found.page };
    },

    async personEvents(projectId, personId, to, limit) {
      // (An alias named like a column would stand for it in WHERE and ORDER BY too: `ms`.)
      const found = await select<{ event: string; properties: string; ms: string }>(
        `SELECT event, properties, toUnixTimestamp64Milli(timestamp) AS ms FROM ${db}.events
          WHERE project_id = {project:Int64}
            AND distinct_id IN (SELECT distinct_id FROM (${currentMapping}) WHERE person_id = {person:Int64})
            AND timestamp <= parseDateTime64BestEffort({to:String}, 6, 'UTC')
          ORDER BY timestamp LIMIT 1 BY uuid LIMIT {limit:UInt32}`,
        { project: projectId, person: personId, to: to.toISOString(), limit },
      );
      return found.map((r) => ({
        event: r.event,
        properties: JSON.parse(r.properties) as Record<string, unknown>,
        timestamp: new Date(Number(r.ms)),
      }));
    },

    async deletePersonEvents(projectId, groups, hooks) {
      if (groups.every((g) => g.personIds.length === 0 && g.distinctIds.length === 0)) return 0;
      const where = batchPredicate(groups);
      const params = { ...where.params, project: projectId };
      const [span] = await select<{ n: string; lo: string | null; hi: string | null }>(
        `SELECT uniqExact(uuid) AS n, toUnixTimestamp64Milli(min(timestamp)) AS lo, toUnixTimestamp64Milli(max(timestamp)) AS hi
           FROM ${db}.events WHERE ${where.sql}`,
        params,
      );
      const n = Number(span.n);
      if (n === 0) return 0;
      // One lightweight DELETE for the whole batch: rows are masked at once and purged by merges.
      await client.command({ query: `DELETE FROM ${db}.events WHERE ${where.sql}`, query_params: params });
      await hooks.record(n, null);
      await hooks.done({ deleted: n, fromMs: Number(span.lo), toMs: Number(span.hi) + 1 });
      return n;
    },

    async deleteEventsBefore(projectId, before) {
      /** Puts the rows events_retention holds (but those of project `except`) back into events, and empties it. */
      const putBack = async (except: number | null) => {
        // A token of its own: a block like one inserted before must not be dropped as its repeat (and
        // chDB's session would otherwise apply the last batch's token; insert_deduplicate = 0 does not
        // stop that).
        await client.command({
          query: `INSERT INTO ${db}.events SELECT * FROM ${db}.events_retention
                   ${except === null ? '' : 'WHERE project_id != {except:Int64}'}
                  SETTINGS insert_deduplication_token = {token:String}`,
          query_params: { ...(except === null ? {} : { except }), token: `retention:${randomUUID()}` },
        });
        await client.command({ query: `TRUNCATE TABLE ${db}.events_retention` });
      };
      // A run that died between a move and its put-back left the month in events_retention: all back first.
      const [stranded] = await select<{ n: string }>(`SELECT count() AS n FROM ${db}.events_retention`, {});
      if (Number(stranded.n) > 0) await putBack(null);
      const params = { project: projectId, before: before.toISOString() };
      const line = `parseDateTime64BestEffort({before:String}, 6, 'UTC')`;
      const past = `project_id = {project:Int64} AND timestamp < ${line}`;
      const [row] = await select<{ n: string }>(`SELECT uniqExact(uuid) AS n FROM ${db}.events WHERE ${past}`, params);
      const n = Number(row.n);
      if (n === 0) return 0;
      // Months wholly before the line (events are partitioned by month of timestamp) that hold only
      // this project's events go whole: moved out to events_retention in one step, so an event of
      // another project shipped into the month since this look is moved with them and put back.
      const months = await select<{ id: string; others: string }>(
        `SELECT _partition_id AS id, countIf(project_id != {project:Int64}) AS others FROM ${db}.events
          WHERE timestamp < toStartOfMonth(${line}) GROUP BY id HAVING countIf(project_id = {project:Int64}) > 0`,
        params,
      );
      for (const month of months.filter((m) => Number(m.others) === 0)) {
        if (!/^\d{6}$/.test(month.id)) throw new Error(`unexpected partition id ${month.id}`);
        await client.command({
          query: `ALTER TABLE ${db}.events MOVE PARTITION ID '${month.id}' TO TABLE ${db}.events_retention`,
        });
        await putBack(projectId);
      }
      // The rest (months the line cuts, months shared with other projects): one lightweight DELETE,
      // rows masked at once and purged by merges.
      const [left] = await select<{ n: string }>(`SELECT count() AS n FROM ${db}.events WHERE ${past}`, params);
      if (Number(left.n) > 0)
        await client.command({ query: `DELETE FROM ${db}.events WHERE ${past}`, query_params: params });
      return n;
    },

    async scrubEventCounts(projectId, match) {
      const params: Record<string, unknown> = {};
      const where = scrubPredicate(projectId, match, params);
      const [row] = await select<{ n: string }>(`SELECT uniqExact(uuid) AS n FROM ${db}.events WHERE ${where}`, params);
      return { clickhouse: Number(row.n) };
    },

    async scrubEvents(projectId, match, action, hooks) {
      const strip = action.kind === 'strip_properties';
      const params: Record<string, unknown> = {};
      const where = scrubPredicate(projectId, strip ? { ...match, keys: action.keys } : match, params);
      const [row] = await select<{ n: string }>(`SELECT uniqExact(uuid) AS n FROM ${db}.events WHERE ${where}`, params);
      const n = Number(row.n);
      if (n === 0) return { clickhouse: 0 };
      if (strip) {
        // The properties rebuilt without the keys (their other members' raw JSON kept as it was), by a
        // mutation the statement waits for.
        params.scrub_strip = action.keys;
        await client.command({
          query: `ALTER TABLE ${db}.events UPDATE properties = concat('{', arrayStringConcat(arrayMap(kv -> concat(toJSONString(kv.1), ':', kv.2),
                    arrayFilter(kv -> NOT has({scrub_strip:Array(String)}, kv.1), JSONExtractKeysAndValuesRaw(properties))), ','), '}')
                  WHERE ${where}`,
          query_params: params,
          clickhouse_settings: { mutations_sync: '2' },
        });
      } else {
        // One lightweight DELETE for the scrub: rows masked at once and purged by merges.
        await client.command({ query: `DELETE FROM ${db}.events WHERE ${where}`, query_params: params });
      }
      await hooks.record('clickhouse', n, null);
      await hooks.done('clickhouse', n);
      return { clickhouse: n };
    },

    survivorsStatement: `SELECT uniqExact(uuid) AS n FROM ${db}.events WHERE project_id = $project_id AND ((has($person_uuids, person_id) AND timestamp <= $cutoff AND created_at <= $cutoff) OR (has($distinct_ids, distinct_id) AND timestamp <= $cutoff AND created_at <= $cutoff))`,
    async countPersonEvents(projectId, groups) {
      if (groups.every((g) => g.personIds.length === 0 && g.distinctIds.length === 0)) return 0;
      const where = batchPredicate(groups);
      const [row] = await select<{ n: string }>(`SELECT uniqExact(uuid) AS n FROM ${db}.events WHERE ${where.sql}`, {
        ...where.params,
        project: projectId,
      });
      return Number(row.n);
    },

    async performedEventPersonIds(projectId, query, among) {
      const params: Record<string, unknown> = {
        project: projectId,
        event: query.event,
        since: query.since.toISOString(),
        times: query.times,
        among: among ?? [],
      };
      const filter = clickHouseFilterSql(query.eventFilters, 'e.properties', params);
      // Ascending by the Int64 id, PostgreSQL's order, so the answer needs no sort here.
      return selectIds(
        `SELECT d.person_id AS pid
           FROM ${db}.events AS e INNER JOIN (${currentMapping}) AS d ON d.distinct_id = e.distinct_id
          WHERE e.project_id = {project:Int64} AND e.event = {event:String}
            AND e.timestamp >= parseDateTime64BestEffort({since:String}, 6, 'UTC') AND ${filter}
            ${among === undefined ? '' : 'AND toString(d.person_id) IN {among:Array(String)}'}
          GROUP BY d.person_id HAVING uniqExact(e.uuid) >= {times:UInt64} ORDER BY d.person_id`,
        params,
      );
    },

    personEventCounts: (projectId, group) => personEventCounts(projectId, group, null),
    trimmedPersonEventCounts: (projectId, group, ranges, before) => personEventCounts(projectId, group, ranges, before),

    async recentEventsCarryFlagValues(projectId, events) {
      if (events.length === 0) return false;
      const [row] = await select<{ has: number }>(
        `SELECT count() > 0 AS has FROM (
           SELECT properties FROM ${db}.events
            WHERE project_id = {project:Int64} AND event IN {names:Array(String)}
              AND timestamp > now64(6) - INTERVAL 7 DAY LIMIT 20)
          WHERE arrayExists(k -> startsWith(k, '$feature/'), JSONExtractKeys(properties))`,
        { project: projectId, names: events },
      );
      return Boolean(Number(row.has));
    },

    async experimentDayChanges(projectId, request) {
      if (request.metrics.length === 0) return [];
      const statement = dayChangesStatement(db, currentMapping, projectId, request);
      return statement.read(await select<DayChangeRow>(statement.sql, statement.params));
    },

    async *experimentEvents(projectId, filter, properties) {
      const where = experimentEventsWhere(projectId, filter);
      // Each distinct id's events come as one row of numbers: times (microseconds after `from`, each as
      // the step from the one before) and name indexes, both in (time, name) order, then the exposures
      // and the asked values as (time, name, …) tuples of the events that have them. So the answer is
      // about a third of a row per event, and the worker parses numbers, not a row per event. Names
      // are indexed in byte order, so the order within a time is the name's, as PostgreSQL's
      // `collate "C"`.
      const names = experimentNames(filter);
      const from = filter.from.getTime() * 1000;
      const params: Record<string, unknown> = { ...where.params, dict: names, fromMicros: from };
      properties.forEach((p, i) => {
        params[`p${i}`] = p.key;
        params[`pe${i}`] = p.events;
      });
      const values = properties.map((_, i) => `v${i}`);
      // A large read goes in parts by distinct id (ranges from a sample of them, in byte order): the
      // engine computes the next part while the worker takes in this one. One part reads the range
      // again (a scan of its names and times), so parts are large.
      const [size] = await select<{ n: string; sample: string[] }>(
        `SELECT count() AS n, arraySort(groupArraySample(1000, 1)(distinct_id)) AS sample
           FROM ${db}.events WHERE ${where.sql}`,
        where.params,
      );
      const parts = partsFor(Number(size.n), experimentPart);
      const bounds = partBounds(
        Array.from({ length: parts - 1 }, (_, i) => size.sample[Math.floor(((i + 1) * size.sample.length) / parts)]),
      );
      const part = (i: number) => {
        const { from: lo, to: hi } = partRange(bounds, i);
        return client.query({
          query: `SELECT distinct_id, arrayPopFront(arrayDifference(arrayPushFront(arraySort(groupArray(rel)), 0))), arraySort((k, r) -> (r, k), groupArray(k), groupArray(rel)),
                         arraySort(groupArrayIf((rel, k, exposure), exposure IS NOT NULL))
                         ${values.length ? `, arraySort(groupArrayIf((rel, k, ${values.join(', ')}), ${values.map((v) => `${v} != ''`).join(' OR ')}))` : ''}
                    FROM (SELECT distinct_id, indexOf({dict:Array(String)}, event) AS k,
                                 toUnixTimestamp64Micro(timestamp) - {fromMicros:Int64} AS rel,
                                 if(event = '$feature_flag_called' AND ${jsonText('properties', "'$feature_flag'")} = {flag:String},
                                    ${jsonText('properties', "'$feature_flag_response'")}, NULL) AS exposure
                                 ${values.map((v, i) => `, if(event IN {pe${i}:Array(String)}, JSONExtractRaw(properties, {p${i}:String}), '') AS ${v}`).join('')}
                            FROM ${db}.events WHERE ${where.sql}
                             ${lo === null ? '' : 'AND distinct_id >= {lo:String}'} ${hi === null ? '' : 'AND distinct_id < {hi:String}'}
                           LIMIT 1 BY uuid)
                   GROUP BY distinct_id ORDER BY distinct_id`,
          query_params: { ...params, lo: lo ?? '', hi: hi ?? '' },
          format: 'JSONCompactEachRow',
          clickhouse_settings: { output_format_json_quote_64bit_integers: 0 },
        });
      };
      type Grouped = [string, number[], number[], [number, number, string][], [number, number, ...string[]][]?];
      // Raw JSON values ('' when missing), parsed here: the same values PostgreSQL's `->` gives.
      const raw = (v: string): unknown => (v === '' ? null : JSON.parse(v));
      // Chunk by chunk as the answer streams (an experiment can read millions: no one string of it
      // all), of at least 65,536 events (chDB hands over a whole answer as one batch).
      let chunk: ExperimentEvents[] = [];
      let chunkEvents = 0;
      // (A part already asked for when the reader stops early is closed: it would hold a connection.)
      for await (const result of inTurn(bounds.length + 1, part, (r) => r.close()))
        for await (const batch of result.stream<Grouped>())
          for (const row of batch) {
            // The row's own arrays become the columns: steps summed into times, names numbered from 0.
            const [distinctId, t, name, exposures, valued = []] = row.json();
            const list: ExperimentEvents = {
              distinctId,
              t,
              name,
              exposureAt: [],
              exposure: [],
              valuedAt: [],
              values: [],
            };
            // Events of equal time and name are alike but for these: each takes the next one of its key.
            let x = 0;
            let v = 0;
            let rel = 0;
            for (let j = 0; j < t.length; j++) {
              rel += t[j];
              const k = name[j];
              if (x < exposures.length && exposures[x][0] === rel && exposures[x][1] === k) {
                list.exposureAt.push(j);
                list.exposure.push(exposures[x++][2]);
              }
              if (v < valued.length && valued[v][0] === rel && valued[v][1] === k) {
                list.valuedAt.push(j);
                list.values.push((valued[v++].slice(2) as string[]).map(raw));
              }
              t[j] = from + rel;
              name[j] = k - 1;
            }
            chunk.push(list);
            chunkEvents += t.length;
            if (chunkEvents >= 65_536) {
              yield chunk;
              chunk = [];
              chunkEvents = 0;
            }
          }
      if (chunk.length) yield chunk;
    },

    async hasExperimentEvents(projectId, filter, arrivedSince) {
      const where = experimentEventsWhere(projectId, filter);
      const [row] = await select<{ has: number }>(
        `SELECT count() > 0 AS has FROM (SELECT 1 FROM ${db}.events WHERE ${where.sql}
           ${arrivedSince ? "AND _inserted_at >= parseDateTime64BestEffort({since:String}, 6, 'UTC')" : ''} LIMIT 1)`,
        { ...where.params, since: arrivedSince?.toISOString() ?? '' },
      );
      return Boolean(Number(row.has));
    },

    exportPersonEvents: async (projectId, group, write) => ({
      clickhouse: await exportEvents(projectId, group, null, write),
    }),
    countExportEvents: async (projectId, group) => ({ clickhouse: await countExportEvents(projectId, group, null) }),
    trimmedExportPersonEvents: (projectId, group, ranges, write) => exportEvents(projectId, group, ranges, write),
    countTrimmedExportEvents: (projectId, group, ranges) => countExportEvents(projectId, group, ranges),
    countEventsBefore: (projectId, before) => countEventsBefore(projectId, before, null),
    async recentEventSample(projectId, since, limit) {
      const params = { project: projectId, since: since.toISOString(), limit };
      const where = `project_id = {project:Int64} AND timestamp >= parseDateTime64BestEffort({since:String}, 6, 'UTC')`;
      const [row] = await select<{ n: string }>(`SELECT uniqExact(uuid) AS n FROM ${db}.events WHERE ${where}`, params);
      const found =
        limit > 0
          ? await select<{ event: string; properties: string }>(
              `SELECT event, properties FROM ${db}.events WHERE ${where} ORDER BY timestamp DESC LIMIT 1 BY uuid LIMIT {limit:UInt32}`,
              params,
            )
          : [];
      return {
        total: Number(row.n),
        events: found.map((e) => ({ event: e.event, properties: JSON.parse(e.properties) })),
      };
    },
    countTrimmedEventsBefore: (projectId, before, ranges) => countEventsBefore(projectId, before, ranges),

    async countEvents(projectId, event) {
      const [row] = await select<{ n: string }>(
        `SELECT uniqExact(uuid) AS n FROM ${db}.events WHERE project_id = {project:Int64}
           ${event === undefined ? '' : 'AND event = {event:String}'}`,
        { project: projectId, event },
      );
      return Number(row.n);
    },

    async distinctIdMappings(projectId) {
      const found = await select<{ distinct_id: string; person_id: string; created_at: string }>(
        `SELECT distinct_id, toString(person_id) AS person_id, toString(person_created_at) AS created_at
           FROM (${currentMappingCreated})`,
        { project: projectId },
      );
      return new Map(found.map((r) => [r.distinct_id, { personId: r.person_id, createdAt: r.created_at }]));
    },

    async mirrorDistinctIds(mappings) {
      if (mappings.length === 0) return;
      // Versions only grow: one past the highest written, so these replace every earlier row.
      const [{ v }] = await select<{ v: string }>(`SELECT max(version) AS v FROM ${db}.person_distinct_id`, {});
      const version = Number(v) + 1;
      await client.insert({
        table: `${db}.person_distinct_id`,
        values: mappings.map((m) => ({
          project_id: m.projectId,
          distinct_id: m.distinctId,
          person_id: m.personId ?? 0,
          person_created_at: m.personCreatedAt ?? chTime(new Date(0)),
          is_deleted: m.personId === null ? 1 : 0,
          version,
        })),
        format: 'JSONEachRow',
      });
    },

    async ping() {
      const answer = await client.ping();
      if (!answer.success) throw answer.error;
    },

    close: () => client.close(),
  };
  return store;
}
