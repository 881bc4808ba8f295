// The event store: the one interface through which events are written, analysed, counted and
// deleted, whatever engine holds them. Two implementations: PostgreSQL (postgres.ts, the default:
// the partitioned `event` table) and ClickHouse (clickhouse.ts). Persons stay in PostgreSQL; an
// engine answers with person ids, and pages of persons are read from PostgreSQL.
import type { EntityManager } from '@mikro-orm/postgresql';
import { byteOrder } from './parts.ts';

export interface FunnelParams {
  steps: string[];
  from: Date;
  to: Date;
  /** Conversion window, in whole days. */
  windowDays: number;
}

export interface Page {
  limit: number;
  offset: number;
}

/** The persons of an analytics answer: how many, and one page of their ids (newest person first). */
export interface PersonIdPage {
  count: number;
  personIds: string[];
}

export const LIFECYCLE_TYPES = ['new', 'returning', 'resurrecting', 'dormant'] as const;

export type LifecycleType = (typeof LIFECYCLE_TYPES)[number];

export interface LifecycleParams {
  /** The day (its UTC calendar date), in the project's time zone. */
  day: Date;
  type: LifecycleType;
  /** Only this event counts as activity; null: any event. */
  event: string | null;
  timezone: string;
}

export interface TimelineEvent {
  event: string;
  properties: Record<string, unknown>;
  timestamp: Date;
}

export interface EventRow {
  uuid: string;
  projectId: number;
  event: string;
  distinctId: string;
  /** The person's uuid at ingestion time (null for personless events). */
  personId: string | null;
  properties: Record<string, unknown>;
  timestamp: Date;
}

export const EVENT_STORE_ENGINES = ['postgres', 'clickhouse'] as const;
export type EventStoreEngine = (typeof EVENT_STORE_ENGINES)[number];

/**
 * The events one deletion batch removes (requests made at the same moment share a cutoff): rows
 * recorded under one of the persons' uuids, or under a distinct id they had when the request was
 * made, with both their event time and their arrival at or before the cutoff.
 */
export interface EventDeletionGroup {
  /** An ISO 8601 timestamp (PostgreSQL's text of a timestamptz is accepted too). */
  cutoff: string;
  /** Person uuids (events carry the uuid of their person at ingestion). */
  personIds: string[];
  distinctIds: string[];
}

/** Rows one delete statement removed that were recorded under one person uuid and distinct id. */
export interface DeletedKeyCount {
  personId: string | null;
  distinctId: string;
  n: number;
}

/** What a deletion reports after each statement. */
export interface DeletionWindow {
  /** Rows the statement deleted. */
  deleted: number;
  /** The event time the statement covered, epoch milliseconds [fromMs, toMs). */
  fromMs: number;
  toMs: number;
}

export interface DeletionHooks {
  /**
   * Counts a statement's rows: inside its PostgreSQL transaction (`tx`) where the engine has one, so
   * the count commits with the delete; after the statement with `tx` null otherwise.
   */
  record(deleted: number, tx: EntityManager | null): Promise<void>;
  /**
   * When given, a statement's rows by the (person uuid, distinct id) they were recorded under, in its
   * transaction like `record`: what a deletion receipt counts as found before (PostgreSQL only).
   */
  recordKeys?(counts: DeletedKeyCount[], tx: EntityManager, group: EventDeletionGroup): Promise<void>;
  /** After each statement (committed), outside any transaction: progress, lease renewal. */
  done(window: DeletionWindow): Promise<void>;
}

/**
 * PostHog's behavioural cohort filter ("performed_event", "performed_event_multiple"): persons with at
 * least `times` events named `event` at or after `since` whose properties match `eventFilters`.
 */
export interface PerformedEventQuery {
  event: string;
  since: Date;
  times: number;
  /** A property filter tree over the events' properties (property-filters.ts checks it; [] for none). */
  eventFilters: unknown;
}

/** How a retention deletion goes (deleteEventsBefore). */
export interface RetentionDeletion {
  /** Rows a PostgreSQL delete statement removes at most (DELETION_CHUNK_SIZE). */
  chunk: number;
  /** After each statement that removed rows of the source (PostgreSQL's partitions): the count, and where. */
  onDeleted?: (n: number, table: string) => Promise<void> | void;
}

/**
 * A batch of a person's events as an access export hands them over: one JSON object per event (no
 * newline), with the same members whatever the store: uuid, event, distinct_id, person_id, timestamp
 * and created_at (ISO 8601 UTC, microseconds), properties; and each line's event name beside it.
 */
export interface EventExportBatch {
  lines: string[];
  names: string[];
}

/**
 * The events an access export covers: those recorded under one of the persons' uuids or under one of
 * their distinct ids that had arrived by the cutoff (created_at at or before it, whatever their event
 * time).
 */
export interface EventExportGroup {
  /** An ISO 8601 timestamp. */
  cutoff: string;
  personIds: string[];
  distinctIds: string[];
}

/** A deletion group's events of one (person uuid, distinct id) pair. */
export interface PersonEventCount {
  personId: string | null;
  distinctId: string;
  n: number;
}

/**
 * The events an experiment's results read: exposures to its flag (`$feature_flag_called` with
 * `$feature_flag` = `flagKey`) and events of the metrics' names, with event time in [from, to).
 */
export interface ExperimentEventFilter {
  flagKey: string;
  /** The metrics' event names. */
  events: string[];
  from: Date;
  to: Date;
  /** Only these distinct ids' events. */
  distinctIds?: readonly string[];
}

/**
 * Events as columns (one entry per event, in time order; the same instant: by name), with the
 * exposures and the events that carry values listed apart: most events have neither.
 */
export interface EventColumns<V = unknown> {
  /** Each event's time, epoch microseconds. */
  t: number[];
  /** Each event's name, as its place in the read's names (experimentNames: byte order). */
  name: number[];
  /** The exposures to the flag among the events: their places (ascending) … */
  exposureAt: number[];
  /** … and their `$feature_flag_response` as text (PostgreSQL's `->>`). */
  exposure: string[];
  /** The events with a value of an asked property: their places (ascending) … */
  valuedAt: number[];
  /** … and, for each, the asked properties' values in order (null: missing, or not asked of its name). */
  values: V[][];
}

/** Columns of no event, to append to. */
export const noEventColumns = <V = unknown>(): EventColumns<V> => ({
  t: [],
  name: [],
  exposureAt: [],
  exposure: [],
  valuedAt: [],
  values: [],
});

/** One distinct id's events an experiment reads (experimentEvents): all of them, with JSON values. */
export interface ExperimentEvents extends EventColumns {
  distinctId: string;
}

/**
 * The names an experiment's read numbers its events by (EventColumns.name): the metrics' events and
 * `$feature_flag_called`, in byte order, so the numbers order names as both stores do.
 */
export const experimentNames = (filter: Pick<ExperimentEventFilter, 'events'>): string[] =>
  [...new Set([...filter.events, '$feature_flag_called'])].sort(byteOrder);

/** A property an experiment reads (experimentEvents): its JSON value, of the events of these names only. */
export interface ExperimentProperty {
  key: string;
  events: readonly string[];
}

/**
 * A metric an engine can fold per person itself (EventStore.experimentDayChanges): a mean of events
 * counted (`property` null) or of a property summed, a ratio of two such, or an ordered funnel.
 */
export type EngineMetric =
  | { kind: 'mean'; event: string; property: string | null }
  | {
      kind: 'ratio';
      numerator: { event: string; property: string | null };
      denominator: { event: string; property: string | null };
    }
  | { kind: 'funnel'; events: string[] };

/** An experiment's computation from the start, as experimentDayChanges takes it. */
export interface ExperimentDayRequest {
  flagKey: string;
  /** The flag's variants: an exposure to another value is none. */
  variants: readonly string[];
  /** Exposures count from here (the experiment's start) … */
  start: Date;
  /** … to here (exclusive); so do the metrics' events. */
  until: Date;
  /** The start day's UTC midnight: day 0. */
  firstDay: Date;
  /** Days from day 0 that the answer covers (the last is `until`'s). */
  days: number;
  /** CUPED: each person's covariate over this many days before their first exposure (0: off). */
  lookbackDays: number;
  metrics: readonly EngineMetric[];
}

/**
 * One variant's change on one day of a metric's per-variant sums (person-state.ts's rules): persons
 * entering and leaving (n), Σv and Σv² of their values so far, the CUPED covariate's Σx, Σx², Σxv, and
 * each funnel step's persons. Days without a change are not listed.
 */
export interface DayChange {
  variant: string;
  day: number;
  n: number;
  sum: number;
  sumSq: number;
  x: number;
  xx: number;
  xy: number;
  /** Ratio: Σd, Σd², Σm·d of the denominator d and the numerator m (0 for the other kinds). */
  d: number;
  dd: number;
  md: number;
  /** Funnel: each step's change (empty for a mean). */
  steps: number[];
}

/** recentEventSample's answer: `events` holds at most the limit, newest first; `total` counts them all. */
export interface RecentEventSample {
  total: number;
  events: { event: string; properties: Record<string, unknown> }[];
}

/**
 * The events a scrub by content covers: of a project, with event time in [after, before), of one name
 * and/or matching PostHog property filters, of some distinct ids, and only those that had arrived by
 * the cutoff (created_at at or before it: a scrub never touches an event received after it was asked).
 * With `keys` (strip_properties) only the events carrying at least one of them.
 */
export interface EventScrubMatch {
  event: string | null;
  /** A property filter tree over the events' properties ([] for none); checked by property-filters.ts. */
  properties: unknown;
  after: Date;
  before: Date;
  distinctIds: readonly string[] | null;
  /** An ISO 8601 timestamp (PostgreSQL's text of a timestamptz is accepted too). */
  cutoff: string;
  /** strip_properties: only events that carry one of these keys. */
  keys?: readonly string[];
}

/** What a scrub does to its matching events. */
export type EventScrubAction = { kind: 'delete' } | { kind: 'strip_properties'; keys: readonly string[] };

/** Matching events per store: `postgres` (its rows, the buffer with ClickHouse on) and `clickhouse` when it is on. */
export interface ScrubStoreCounts {
  postgres?: number;
  clickhouse?: number;
}

export interface ScrubHooks {
  /**
   * Counts a statement's rows: inside its PostgreSQL transaction (`tx`), so the count commits with the
   * change; after the statement with `tx` null where the engine has none (ClickHouse).
   */
  record(store: keyof ScrubStoreCounts, changed: number, tx: EntityManager | null): Promise<void>;
  /** After each committed statement: its store and rows changed (progress, lease renewal). */
  done(store: keyof ScrubStoreCounts, changed: number): Promise<void>;
}

export interface EventStore {
  readonly engine: EventStoreEngine;
  /** Stores a batch of events; a uuid already stored is ignored, so a retried batch is harmless. */
  insert(rows: EventRow[]): Promise<void>;
  /**
   * The persons at a funnel step (PostHog's persons funnel): `step` > 0 reached step `step`;
   * `step` < 0 (−2..−n) reached step |step|−1 but not |step| (the drop-off). Newest person first.
   */
  funnelPersonIds(projectId: number, params: FunnelParams, step: number, page: Page): Promise<PersonIdPage>;
  /**
   * Funnel correlation's persons: those who reached the last step (`converted`) or started and did
   * not, and performed `entity` in the range. Newest person first.
   */
  funnelCorrelationPersonIds(
    projectId: number,
    params: FunnelParams,
    entity: string,
    converted: boolean,
    page: Page,
  ): Promise<PersonIdPage>;
  /** The persons in a lifecycle bucket (new, returning, resurrecting, dormant) on a day. Newest person first. */
  lifecyclePersonIds(projectId: number, lifecycle: LifecycleParams, page: Page): Promise<PersonIdPage>;
  /**
   * A person's events (those of its current distinct ids) up to `to`, oldest first, at most `limit`:
   * what its properties timeline is rebuilt from. `personId` is the person's id (not its uuid).
   */
  personEvents(projectId: number, personId: string, to: Date, limit: number): Promise<TimelineEvent[]>;
  /**
   * Deletes the groups' events (one deletion batch of a project), each statement reported to `hooks`:
   * PostgreSQL deletes windows of event time sized to DELETION_CHUNK_SIZE rows; ClickHouse deletes
   * the whole batch in one statement. Returns the rows deleted.
   */
  deletePersonEvents(projectId: number, groups: EventDeletionGroup[], hooks: DeletionHooks): Promise<number>;
  /** The groups' events still stored (counted up to `limit`): zero once a deletion is complete. */
  countPersonEvents(projectId: number, groups: EventDeletionGroup[], limit?: number): Promise<number>;
  /** The statement countPersonEvents runs, with named parameters: what a deletion receipt cites. */
  readonly survivorsStatement: string;
  /**
   * The persons (ids, ascending) who match a behavioural cohort filter: a person's events are those
   * of its current distinct ids. `among` (person ids) narrows the answer to those persons.
   * Throws FilterError for a malformed filter.
   */
  performedEventPersonIds(projectId: number, query: PerformedEventQuery, among?: readonly string[]): Promise<string[]>;
  /**
   * A deletion group's events as they are now (what a dry run would delete, what a receipt counts
   * before the deletes), by person uuid and distinct id, in no order.
   */
  personEventCounts(projectId: number, group: EventDeletionGroup): Promise<PersonEventCount[]>;
  /**
   * PostHog's check that a flag is implemented: whether some of the latest week's events of these names
   * (a sample of 20) carry `$feature/…` properties, the flag values SDKs send.
   */
  recentEventsCarryFlagValues(projectId: number, events: string[]): Promise<boolean>;
  /**
   * The events an experiment's results read (see ExperimentEventFilter), each once, with the values of
   * `properties`: each distinct id's at once (all of them), in chunks as they are read, ordered by
   * distinct id (bytewise): the caller maps distinct ids to persons by PostgreSQL's mapping now and
   * folds persons in batches, so millions of events need not be held at once.
   */
  experimentEvents(
    projectId: number,
    filter: ExperimentEventFilter,
    properties: readonly ExperimentProperty[],
  ): AsyncIterable<ExperimentEvents[]>;
  /**
   * Optional: the engine folds each exposed person's events itself (sufficient statistics per person
   * and day, each person by its distinct ids' person now) and answers each metric's changes per day and
   * variant, by the same rules as the worker's fold of experimentEvents (person-state.ts).
   */
  experimentDayChanges?(projectId: number, request: ExperimentDayRequest): Promise<DayChange[][]>;
  /**
   * Whether some event of the filter is stored; with `arrivedSince`, one that reached this store at or
   * after that time (PostgreSQL: created_at; ClickHouse: when the shipper inserted it): how a run of
   * the experiment results knows data arrived late for days it already computed.
   */
  hasExperimentEvents(projectId: number, filter: ExperimentEventFilter, arrivedSince?: Date): Promise<boolean>;
  /** The events a scrub matches, per store (a dry run's counts, a receipt's before and after). */
  scrubEventCounts(projectId: number, match: EventScrubMatch): Promise<ScrubStoreCounts>;
  /**
   * Deletes the matching events, or removes `keys` from their properties; returns the rows changed per
   * store. PostgreSQL: statements over windows of event time of about DELETION_CHUNK_SIZE rows;
   * ClickHouse: one statement for the scrub (a lightweight DELETE, or an ALTER TABLE … UPDATE).
   */
  scrubEvents(
    projectId: number,
    match: EventScrubMatch,
    action: EventScrubAction,
    hooks: ScrubHooks,
  ): Promise<ScrubStoreCounts>;
  /**
   * An access export's events (EventExportGroup), each once (by uuid), in batches handed to `write` as
   * they are read (each awaited before the next is read, so nothing accumulates); returns the rows
   * handed over by the store that held them ({postgres: n} or {postgres: n, clickhouse: m}: with
   * EVENT_STORE=clickhouse, ClickHouse's are those PostgreSQL's buffer no longer holds).
   */
  exportPersonEvents(
    projectId: number,
    group: EventExportGroup,
    write: (batch: EventExportBatch) => Promise<void>,
  ): Promise<Record<string, number>>;
  /** What exportPersonEvents would hand over now, by store (a dry run). */
  countExportEvents(projectId: number, group: EventExportGroup): Promise<Record<string, number>>;
  /** The project's events with a timestamp before `before` (what retention would remove). */
  countEventsBefore(projectId: number, before: Date): Promise<number>;
  /**
   * Removes the project's events with a timestamp before `before` (retention past its
   * event_retention_days); returns how many. PostgreSQL deletes them partition by partition in
   * statements of `chunk` rows; ClickHouse moves out the monthly partitions wholly before the line
   * that hold only this project's events and masks the rest with one lightweight DELETE.
   */
  deleteEventsBefore(projectId: number, before: Date, deletion: RetentionDeletion): Promise<number>;
  /** The project's events (of one name, if given), for verification. */
  countEvents(projectId: number, event?: string): Promise<number>;
  /**
   * The project's events with a timestamp at or after `since`: how many in all, and the newest `limit`
   * of them (name and properties), for checking them against a proposed tracking plan.
   */
  recentEventSample(projectId: number, since: Date, limit: number): Promise<RecentEventSample>;
  /** Resolves when the engine answers (PostgreSQL's own: at once; the API checks PostgreSQL apart); throws otherwise. */
  ping(): Promise<void>;
  close(): Promise<void>;
}

/** What a feature that reads or deletes events takes beside the platform's Deps (shared/platform/deps.ts). */
export interface EventStoreDeps {
  /** Where events are analysed and deleted (EVENT_STORE). */
  events: EventStore;
}
