// Computing an experiment metric from events (spec A2–A3): exposures are persons with
// `$feature_flag_called` for the flag (variant from `$feature_flag_response`; persons seen in
// more than one variant are excluded), then the metric over each person's events after their first
// exposure. Results are cumulative from the start date to each day's end, as PostHog's timeseries are.
//
// The events come from the event store (EventStore.experimentEvents: exposures to the flag and the
// metrics' events, one read of the range, on PostgreSQL or ClickHouse alike); each is given its
// distinct id's person now (PostgreSQL's mapping, so a merge or split since counts as it is today),
// and every person's events are folded by person-state.ts's rules: the day they enter (first
// exposure), the day they leave (the first exposure to a second variant, after which PostHog counts
// them nowhere), their metric values or funnel steps in between, into per-variant, per-day changes
// added up cumulatively. So N days cost one read of the range, not N reads from the start.
//
// The daily run continues the stored days instead (computeCountsSince): the latest complete day's
// per-variant sums plus the change since, from the events since then and each of their persons'
// stored state as of that day's end (experiment_person_state), which a computation from the start
// also writes. Both are the same fold (countsFrom), from no state or from the stored one.
//
// An event store whose engine folds per person itself (EventStore.experimentDayChanges: ClickHouse)
// computes mean and ratio (total, sum) and funnel metrics from the start inside the engine, by the same rules
// (the contract tests hold both stores to equal answers), and answers only each day's per-variant
// changes; there every run is from the start and no per-person state is kept (recomputed 'in_engine').
// Other kinds (retention, percentile, other maths) are folded here from the events on either store.
import type { EntityManager } from '@mikro-orm/postgresql';
import { type Selectable, sql } from 'kysely';
import { type DB, db } from '../platform/db/kysely.ts';
import {
  type EventStore,
  type ExperimentEventFilter,
  type ExperimentEvents,
  type ExperimentProperty,
  type EngineMetric,
  experimentNames,
  noEventColumns,
} from '../events/index.ts';
import { pgArray } from '../platform/db/sql.ts';
import {
  advance,
  type Changes,
  changesByVariant,
  MICROS_PER_DAY,
  type PersonEvents,
  type PersonState,
  statsByDay,
  valuesOf,
  type Window,
} from './person-state.ts';
import {
  type MetricMath,
  mathOf,
  SESSION_PROPERTY,
  sessionNumber,
  valueProperty,
  aggregate,
  additive,
} from './metric-math.ts';
import { advanceRetention, type RetentionRule, retentionSpec } from './retention-metric.ts';
import {
  analyseMetrics,
  type CorrectionConfig,
  correctionConfig,
  cupedLookbackDays,
  type MetricAnalysis,
  type MetricStats,
} from './stats.ts';
import type { MetricKind, VariantStats } from './moments.ts';
import { type SequentialConfig, sequentialConfig } from './sequential.ts';
import { allocationOf } from './bandit.ts';

export interface ExperimentForResults {
  id: number;
  projectId: number;
  flagKey: string;
  variants: string[];
  startDate: Date;
  statsMethod: 'bayesian' | 'frequentist';
  baselineKey: string;
  /** Rollout percentage per variant (the flag's), for the sample ratio mismatch check. */
  rollout?: Record<string, number>;
  correction?: CorrectionConfig | null;
  /** The primary metric, which a preferential Bonferroni correction favours. */
  primaryMetricUuid?: string | null;
  /** CUPED's lookback in days (mean metrics), or 0/undefined when CUPED is off. */
  cupedLookbackDays?: number;
  /** Sequential testing (frequentist): always-valid p-values and confidence sequences. */
  sequential?: SequentialConfig | null;
}

export type MetricResult = MetricAnalysis;

/** The events a mean metric, or a ratio's numerator or denominator, counts (math `total`) or sums (`sum`). */
export interface MetricSource {
  event?: unknown;
  math?: unknown;
  math_property?: unknown;
}

/** A metric as stored in experiment.metrics (PostHog's ExperimentMetric: the fields the engine reads). */
export interface ExperimentMetric {
  uuid?: string;
  fingerprint?: string;
  metric_type?: unknown;
  source?: MetricSource | null;
  series?: unknown;
  /** Ratio metrics: the numerator's and the denominator's sources, each with its math. */
  numerator?: MetricSource | null;
  denominator?: MetricSource | null;
}

interface FlagVariant {
  key: string;
  rollout_percentage?: unknown;
}

/** The experiment's columns the computation reads (the entity's types), with its flag's key and filters. */
export type ExperimentRow = Pick<Selectable<DB['experiment']>, 'id' | 'project_id'> &
  Partial<
    Pick<
      Selectable<DB['experiment']>,
      | 'stats_config'
      | 'guardrail_status'
      | 'metrics'
      | 'metrics_secondary'
      | 'primary_metrics_ordered_uuids'
      | 'parameters'
    >
  > & { start_date: string | Date; flag_key: string; flag_filters?: unknown };

/**
 * Experiments that have started (not deleted), each with its flag's key and filters: what the results
 * job and the guardrail check read (narrow it with where()).
 */
export const startedExperiments = (em: EntityManager) =>
  db(em)
    .selectFrom('experiment as x')
    .innerJoin('feature_flag as f', 'f.id', 'x.feature_flag_id')
    .selectAll('x')
    .select(['f.key as flag_key', 'f.filters as flag_filters'])
    .where('x.deleted', '=', false)
    .where('x.start_date', 'is not', null)
    .where('x.start_date', '<=', sql<Date>`now()`)
    .$narrowType<{ start_date: Date }>();

const record = (x: unknown): Record<string, unknown> =>
  x && typeof x === 'object' ? (x as Record<string, unknown>) : {};

/** The metrics of a stored list (experiment.metrics or metrics_secondary): objects only. */
export const metricsOf = (list: unknown): ExperimentMetric[] =>
  Array.isArray(list) ? list.filter((m): m is ExperimentMetric => !!m && typeof m === 'object') : [];

/** What the computation needs of an experiment row joined with its flag's key and filters (flag_key, flag_filters). */
export function experimentForResults(x: ExperimentRow): ExperimentForResults {
  // After a guardrail trip the flag serves control only: the split the data came from is the one before.
  const guardrail = record(x.guardrail_status);
  const filters = record(guardrail.state === 'tripped' ? guardrail.previous_flag_filters : x.flag_filters);
  const listed = record(filters.multivariate).variants;
  const flagVariants = (Array.isArray(listed) ? listed : []).filter(
    (v): v is FlagVariant => typeof record(v).key === 'string',
  );
  const variants: string[] = flagVariants.map((v) => v.key);
  const stats = record(x.stats_config);
  const statsMethod = stats.method === 'frequentist' ? ('frequentist' as const) : ('bayesian' as const);
  const primaryOrder = Array.isArray(x.primary_metrics_ordered_uuids) ? x.primary_metrics_ordered_uuids : [];
  const primaries = metricsOf(x.metrics);
  const baseline = typeof stats.baseline_variant_key === 'string' ? stats.baseline_variant_key : null;
  return {
    id: x.id,
    projectId: x.project_id,
    flagKey: x.flag_key,
    variants,
    startDate: new Date(x.start_date),
    statsMethod,
    baselineKey: baseline ?? (variants.includes('control') ? 'control' : variants[0]),
    // (Adaptive allocation moves the split: no sample ratio mismatch check against today's percentages.)
    rollout: allocationOf(x.parameters)
      ? undefined
      : Object.fromEntries(
          flagVariants.map((v) => [v.key, typeof v.rollout_percentage === 'number' ? v.rollout_percentage : 0]),
        ),
    correction: statsMethod === 'frequentist' ? correctionConfig(x.stats_config) : null,
    cupedLookbackDays: cupedLookbackDays(x.stats_config),
    sequential: statsMethod === 'frequentist' ? sequentialConfig(x.stats_config) : null,
    primaryMetricUuid:
      primaryOrder.find((uuid) => primaries.some((m) => m.uuid === uuid)) ?? primaries[0]?.uuid ?? null,
  };
}

const DAY = 86400_000;
const utcDay = (t: number) => Math.floor(t / DAY) * DAY;

const UNSUPPORTED =
  'Unsupported metric: mean metrics need source.event; ratio metrics numerator.event and denominator.event; funnel metrics need series of events.';

/** The property a source's math reads (metric-math.ts), or null when each event is 1. */
const summed = (source: MetricSource) => valueProperty(source);

/**
 * The events a metric counts: mean → one source event; ratio → the numerator's event, then the
 * denominator's (the same one, possibly); funnel → ordered series of events. `mathProperty` is what
 * the (first) event sums, `denominatorProperty` what a ratio's denominator sums.
 */
export function metricShape(metric: ExperimentMetric | null | undefined): {
  kind: MetricKind;
  events: string[];
  mathProperty: string | null;
  denominatorProperty?: string | null;
  /** Mean (ratio: numerator) and ratio denominator maths (metric-math.ts). */
  math?: MetricMath;
  denominatorMath?: MetricMath;
} | null {
  const retention = retentionSpec(metric);
  if (retention)
    return {
      kind: 'retention',
      events: [...(retention.startEvent === null ? [] : [retention.startEvent]), retention.completionEvent],
      mathProperty: null,
    };
  if (metric?.metric_type === 'mean' && typeof metric.source?.event === 'string') {
    const math = mathOf(metric.source);
    return math ? { kind: 'mean', events: [metric.source.event], mathProperty: summed(metric.source), math } : null;
  }
  const { numerator, denominator } = metric ?? {};
  if (
    metric?.metric_type === 'ratio' &&
    typeof numerator?.event === 'string' &&
    typeof denominator?.event === 'string'
  ) {
    const [math, denominatorMath] = [mathOf(numerator), mathOf(denominator)];
    if (!math || !denominatorMath) return null;
    return {
      kind: 'ratio',
      events: [numerator.event, denominator.event],
      mathProperty: summed(numerator),
      denominatorProperty: summed(denominator),
      math,
      denominatorMath,
    };
  }
  const series = metric?.metric_type === 'funnel' && Array.isArray(metric.series) ? metric.series : [];
  const events = series.map((s) => record(s).event);
  if (events.length && events.every((e): e is string => typeof e === 'string')) {
    return { kind: 'funnel', events, mathProperty: null };
  }
  return null;
}

/** Each day's metrics analysed together (a multiple-comparison correction may span them). */
function analyseSeries(
  experiment: ExperimentForResults,
  metrics: readonly ExperimentMetric[],
  counts: (MetricStats[] | Error)[],
): (MetricResult[] | Error)[] {
  const primary = metrics.findIndex((m) => m?.uuid && m.uuid === experiment.primaryMetricUuid);
  const settings = {
    method: experiment.statsMethod,
    baselineKey: experiment.baselineKey,
    correction: experiment.correction ?? null,
    rollout: experiment.rollout,
    primaryMetric: primary >= 0 ? primary : 0,
    sequential: experiment.sequential ?? null,
  };
  const days = counts.find((c): c is MetricStats[] => !(c instanceof Error))?.length ?? 0;
  const analysed = Array.from({ length: days }, (_, d) =>
    analyseMetrics(
      counts.map((c) => (c instanceof Error ? null : c[d])),
      settings,
    ),
  );
  return counts.map((c, i) => (c instanceof Error ? c : analysed.map((day) => day[i]!)));
}

/**
 * Each metric's cumulative result for every UTC day from the experiment's start date up to `until`
 * (exclusive): day i counts events before the next midnight, the last day events before `until`.
 * One transaction: the exposures are scanned once, then one statement per metric scans its events.
 * A metric that cannot be computed gets its Error in place of its series; the others are unaffected.
 */
export async function computeExperimentSeries(
  em: EntityManager,
  events: EventStore,
  experiment: ExperimentForResults,
  metrics: readonly ExperimentMetric[],
  until: Date,
): Promise<(MetricResult[] | Error)[]> {
  return analyseSeries(experiment, metrics, await computeExperimentCounts(em, events, experiment, metrics, until));
}

/** Why a run computed from the start rather than from a stored day (null: it did not). */
export type RecomputeReason =
  | 'no_stored_day'
  | 'earlier_days_missing'
  | 'no_person_state'
  | 'late_events'
  | 'deletion'
  | 'retention'
  | 'persons_merged'
  /** The event store's engine computes every day from the start (EventStore.experimentDayChanges). */
  | 'in_engine';

export interface CountsSince<T> {
  /** Index (days since the start date's UTC day) of each series' first entry: the day after the stored one, or 0. */
  firstDay: number;
  series: (T[] | Error)[];
  /** The stored day the series continue (null when computed from the start). */
  baseDay: string | null;
  recomputed: RecomputeReason | null;
}

/**
 * The metrics' cumulative counts for each day from `fromDay` (an index, as `firstDay`) to `until`,
 * continuing the latest stored complete day D: its stored counts, plus the change since its end,
 * from the events since then (one read of the range) and the stored state of the persons they
 * belong to as of D's end (experiment_person_state: a person's variant, first exposure, earlier value
 * and funnel steps, so a returning person is counted once and Σv² grows by their own increment;
 * see person-state.ts). No history is read, except for a person exposed since with CUPED on (the
 * lookback days before their exposure).
 *
 * `saveState`: the state is then advanced to the end of the last day before `until`'s, in the
 * caller's transaction (the daily job stores the days in the same one), or rebuilt by a computation
 * from the start.
 *
 * Computed from the start instead (and `recomputed` says why) when there is no such stored day for
 * every metric, when a day before `fromDay` would be needed, when the state is not as of D, or when
 * the stored days may be wrong now: an event of these metrics or of the flag's exposures arrived
 * (`created_at`) after D was computed with a timestamp before D's end (late data), a deletion or a
 * retention run of the project ran since, or a distinct id with such events before D's end got
 * another person since (a merge or a split: those events now count for someone else). The
 * late-data look-up reads the events inserted since D was computed (all projects', through the index
 * on created_at): `lateEvents: false` skips it (the guardrail check, every 5 minutes, leaves late
 * events to the next daily run). One transaction.
 */
export async function computeCountsSince(
  em: EntityManager,
  events: EventStore,
  experiment: ExperimentForResults,
  metrics: readonly ExperimentMetric[],
  until: Date,
  fromDay: number,
  options: { lateEvents?: boolean; saveState?: boolean } = {},
): Promise<CountsSince<MetricStats>> {
  const firstDay = utcDay(experiment.startDate.getTime());
  const days = until.getTime() > firstDay ? Math.ceil((until.getTime() - firstDay) / DAY) : 0;
  // The last day that ends before `until`: the next run continues it.
  const saveDay = options.saveState ? days - 2 : null;
  return em.transactional(async (tx) => {
    if (foldedInEngine(events, metrics)) {
      // The engine folds from the start each run, in well under the time a stored day would save: no
      // per-person state is kept (any left from before goes), and every stored day is rewritten.
      if (options.saveState)
        for (const metric of metrics) if (metric.uuid) await dropState(tx, experiment.id, metric.uuid);
      const series = (await countsFrom(tx, events, experiment, metrics, null, until, null))!;
      return { firstDay: 0, series, baseDay: null, recomputed: 'in_engine' };
    }
    const base = await storedBase(tx, experiment, metrics, until);
    let reason: RecomputeReason | null = !base
      ? 'no_stored_day'
      : base.index >= fromDay
        ? 'earlier_days_missing'
        : await staleSince(tx, events, experiment, metrics, base, options.lateEvents ?? true);
    if (base && !reason) {
      const series = await countsFrom(tx, events, experiment, metrics, base, until, saveDay);
      if (series) return { firstDay: base.index + 1, series, baseDay: base.day, recomputed: null };
      reason = 'no_person_state';
    }
    const series = (await countsFrom(tx, events, experiment, metrics, null, until, saveDay))!;
    return { firstDay: 0, series, baseDay: null, recomputed: reason ?? 'no_stored_day' };
  });
}

const MICROS = (t: string) => `(extract(epoch from ${t}) * 1000000)::float8`;

// A property's text as a number, as PostgreSQL's numeric would read it: digits with an optional
// point and exponent (at most 4 digits), spaces around allowed; NaN and Infinity are not numbers.
const NUMERIC = /^[ \t\n\r\f\v]*[-+]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][-+]?[0-9]{1,4})?[ \t\n\r\f\v]*$/;

/** A property's value as a number, null when it is not one (a JSON number, or a string of one). */
export function numericValue(value: unknown): number | null {
  const n =
    typeof value === 'number'
      ? value
      : typeof value === 'string' && value.length <= 1000 && NUMERIC.test(value)
        ? Number(value)
        : null;
  return n !== null && Number.isFinite(n) ? n : null;
}

// Lists of distinct ids or persons go to a statement in slices of this many (a ClickHouse server
// takes parameters in the URL).
const SLICE = 5000;
const slices = <T>(list: readonly T[]) =>
  Array.from({ length: Math.ceil(list.length / SLICE) }, (_, i) => list.slice(i * SLICE, (i + 1) * SLICE));

/**
 * The project's distinct ids and each one's person now (PostgreSQL's mapping), those of persons with one
 * distinct id apart from those of persons with several, in one read (one snapshot: a merge cannot fall
 * between the two). The rows come as one row of JSON arrays: a project's 200,000 ids parse natively,
 * not as 200,000 rows.
 */
async function projectMapping(tx: EntityManager, projectId: number) {
  const found = await db(tx)
    .selectFrom((q) =>
      q
        .selectFrom('person_distinct_id')
        .select(['distinct_id', 'person_id', sql<boolean>`count(*) over (partition by person_id) > 1`.as('several')])
        .where('project_id', '=', projectId)
        .as('m'),
    )
    .select([
      sql<string[] | null>`json_agg(m.distinct_id)`.as('ids'),
      sql<string[] | null>`json_agg(m.person_id::text)`.as('persons'),
      sql<boolean[] | null>`json_agg(m.several)`.as('several'),
    ])
    .executeTakeFirstOrThrow(); // (an aggregate: one row, nulls when the project has no id)
  const single = new Map<string, string>();
  const several = new Map<string, string>();
  const { ids, persons, several: ofSeveral } = found;
  for (let i = 0; i < (ids?.length ?? 0); i++) (ofSeveral![i] ? several : single).set(ids![i], persons![i]);
  return { single, several };
}

/**
 * Each distinct id's person now (PostgreSQL's mapping): ids without one are left out. Many ids: the
 * project's whole mapping in one read, rather than an index look-up per id.
 */
async function personsOf(
  tx: EntityManager,
  projectId: number,
  distinctIds: readonly string[],
): Promise<Pick<Map<string, string>, 'get'>> {
  if (distinctIds.length > SLICE) {
    const { single, several } = await projectMapping(tx, projectId);
    return { get: (id) => single.get(id) ?? several.get(id) };
  }
  const found = await db(tx)
    .selectFrom('person_distinct_id')
    .select(['distinct_id', 'person_id'])
    .where('project_id', '=', projectId)
    .where(sql<boolean>`distinct_id = any(${pgArray(distinctIds)}::text[])`)
    .execute();
  return new Map(found.map((r) => [r.distinct_id, String(r.person_id)]));
}

/** Persons' current distinct ids. */
async function distinctIdsOf(tx: EntityManager, projectId: number, persons: readonly string[]) {
  const out: string[] = [];
  for (const slice of slices(persons)) {
    const found = await db(tx)
      .selectFrom('person_distinct_id')
      .select('distinct_id')
      .where('project_id', '=', projectId)
      .where(sql<boolean>`person_id = any(${pgArray(slice)}::bigint[])`)
      .execute();
    out.push(...found.map((r) => r.distinct_id));
  }
  return out;
}

/**
 * The metrics as the event store's engine folds them itself (EventStore.experimentDayChanges), with
 * each shape's place among them; null when the store cannot, or a metric needs the worker's fold
 * (retention, percentile, maths other than total and sum).
 */
function engineMetrics(events: EventStore, shapes: ReturnType<typeof readPlan>['shapes']) {
  const fold = events.experimentDayChanges?.bind(events);
  if (!fold) return null;
  const metrics: EngineMetric[] = [];
  const place: number[] = [];
  for (const shape of shapes) {
    place.push(metrics.length);
    if (shape instanceof Error) continue;
    if (shape.kind === 'mean' && additive(shape.math))
      metrics.push({ kind: 'mean', event: shape.events[0], property: shape.mathProperty });
    else if (shape.kind === 'ratio' && additive(shape.math) && additive(shape.denominatorMath))
      metrics.push({
        kind: 'ratio',
        numerator: { event: shape.events[0], property: shape.mathProperty },
        denominator: { event: shape.events[1], property: shape.denominatorProperty ?? null },
      });
    else if (shape.kind === 'funnel') metrics.push({ kind: 'funnel', events: shape.events });
    else return null;
  }
  return metrics.length ? { fold, metrics, place } : null;
}

/** Whether these metrics' results come from the event store's engine (engineMetrics): then no per-person state is kept. */
const foldedInEngine = (events: EventStore, metrics: readonly ExperimentMetric[]) =>
  engineMetrics(events, readPlan(metrics).shapes) !== null;

/** What a computation reads: its metrics' shapes, the properties they sum and the event names. */
export function readPlan(metrics: readonly ExperimentMetric[]) {
  const shapes = metrics.map((metric) => metricShape(metric) ?? new Error(UNSUPPORTED));
  const valid = shapes.filter((s): s is Exclude<typeof s, Error> => !(s instanceof Error));
  // Each summed property, of the events that sum it only (a mean's one event).
  const properties: ExperimentProperty[] = [];
  const sums = (key: string | null | undefined, event: string) => {
    if (!key) return;
    const had = properties.find((p) => p.key === key);
    if (!had) properties.push({ key, events: [event] });
    else if (!had.events.includes(event)) had.events = [...had.events, event];
  };
  for (const s of valid) {
    sums(s.mathProperty, s.events[0]);
    if (s.kind === 'ratio') sums(s.denominatorProperty, s.events[1]);
  }
  const events = [...new Set(valid.flatMap((s) => s.events))];
  return { shapes, properties, events };
}

/** A distinct id's events as the store gave them, as a person's: values as numbers. */
type IdEvents = PersonEvents & { distinctId: string };

/**
 * A store's list as a person's events, in place: exposures before `exposedFrom` are not exposures
 * (the list is in time order: they come first), and values become numbers.
 */
function asPersonEvents(list: ExperimentEvents, exposedFrom: number, sessionIndex = -1): IdEvents {
  let early = 0;
  while (early < list.exposureAt.length && list.t[list.exposureAt[early]] < exposedFrom) early++;
  if (early) {
    list.exposureAt.splice(0, early);
    list.exposure.splice(0, early);
  }
  for (const values of list.values)
    for (let i = 0; i < values.length; i++)
      if (values[i] !== null) values[i] = i === sessionIndex ? sessionNumber(values[i]) : numericValue(values[i]);
  return list as IdEvents;
}

/** A place in a list of events, with its place in the list's exposures and valued events. */
interface Cursor {
  list: PersonEvents;
  j: number;
  x: number;
  v: number;
}
const cursor = (list: PersonEvents): Cursor => ({ list, j: 0, x: 0, v: 0 });

/** Moves `c` past its event, appending the event (with its exposure and values) to `out` if `keep`. */
function take(out: PersonEvents, c: Cursor, keep = true) {
  const { list, j } = c;
  const at = out.t.length;
  if (keep) {
    out.t.push(list.t[j]);
    out.name.push(list.name[j]);
  }
  if (c.x < list.exposureAt.length && list.exposureAt[c.x] === j) {
    if (keep) {
      out.exposureAt.push(at);
      out.exposure.push(list.exposure[c.x]);
    }
    c.x++;
  }
  if (c.v < list.valuedAt.length && list.valuedAt[c.v] === j) {
    if (keep) {
      out.valuedAt.push(at);
      out.values.push(list.values[c.v]);
    }
    c.v++;
  }
  c.j++;
}

/**
 * Merges a person's lists of several distinct ids in time order (the same instant: by name, whose
 * numbers are in the stores' byte order; then `a`'s first).
 */
function merged(a: PersonEvents, b: PersonEvents): PersonEvents {
  const out = noEventColumns<number | null>();
  const ca = cursor(a);
  const cb = cursor(b);
  while (ca.j < a.t.length || cb.j < b.t.length) {
    const fromA =
      cb.j === b.t.length ||
      (ca.j < a.t.length && (a.t[ca.j] < b.t[cb.j] || (a.t[ca.j] === b.t[cb.j] && a.name[ca.j] <= b.name[cb.j])));
    take(out, fromA ? ca : cb);
  }
  return out;
}

/** Adds a distinct id's events to its person's in `byPerson` (merged with those of their other ids). */
function addTo(byPerson: Map<string, PersonEvents>, person: string, list: PersonEvents) {
  const had = byPerson.get(person);
  byPerson.set(person, had ? merged(had, list) : list);
}

/** The events of `list` from `from` (inclusive) to `to` (exclusive). */
function within(list: PersonEvents, from: number, to: number): PersonEvents {
  const out = noEventColumns<number | null>();
  const c = cursor(list);
  while (c.j < list.t.length) take(out, c, list.t[c.j] >= from && list.t[c.j] < to);
  return out;
}

/** A read of an experiment's events: exposures before `exposedFrom` are not exposures. */
export interface EventsRead {
  events: EventStore;
  projectId: number;
  filter: ExperimentEventFilter;
  properties: readonly ExperimentProperty[];
  exposedFrom: number;
}

/**
 * The events of `filter`, as persons' events, a distinct id's at a time as the store streams them (by
 * distinct id, each with all its events), a store chunk at a time.
 */
async function* distinctIdLists({
  events,
  projectId,
  filter,
  properties,
  exposedFrom,
}: EventsRead): AsyncGenerator<IdEvents[]> {
  for await (const chunk of events.experimentEvents(projectId, filter, properties))
    yield chunk.map((list) =>
      asPersonEvents(
        list,
        exposedFrom,
        properties.findIndex((p) => p.key === SESSION_PROPERTY),
      ),
    );
}

/**
 * The events of `filter` grouped by their person now (PostgreSQL's mapping, so a merge or a split
 * since the events were stored counts as it is today, in either event store), each person's in time
 * order, all at once: the daily run's reads (the events since a stored day).
 */
async function eventsByPerson(tx: EntityManager, read: EventsRead): Promise<Map<string, PersonEvents>> {
  const lists: IdEvents[] = [];
  for await (const complete of distinctIdLists(read)) lists.push(...complete);
  const persons = await personsOf(
    tx,
    read.projectId,
    lists.map((list) => list.distinctId),
  );
  const byPerson = new Map<string, PersonEvents>();
  for (const list of lists) {
    const person = persons.get(list.distinctId);
    if (person !== undefined) addTo(byPerson, person, list);
  }
  return byPerson;
}

// A computation from the start folds persons in batches of about this many events.
export const BATCH_EVENTS = 250_000;

/**
 * A computation from the start's persons and their events, in batches (about `batchEvents` events
 * each) as the store's rows stream in by distinct id: a person with one distinct id is complete when
 * the next id's rows begin; persons with several (PostgreSQL's mapping, read first) are kept until
 * the end, when all their ids have come. So memory holds a batch, not the experiment.
 */
export async function* personBatches(
  tx: EntityManager,
  read: EventsRead,
  batchEvents: number,
): AsyncGenerator<Map<string, PersonEvents>> {
  // The mapping is read while the store starts its answer (two servers, or chDB's own threads).
  const reading = projectMapping(tx, read.projectId);
  reading.catch(() => {}); // (awaited below: a failed store read must not leave it unhandled)
  let mapping: Awaited<typeof reading> | null = null;
  const several = new Map<string, PersonEvents>();
  let batch = new Map<string, PersonEvents>();
  let size = 0;
  for await (const complete of distinctIdLists(read)) {
    if (!mapping) mapping = await reading;
    for (const list of complete) {
      let person = mapping.single.get(list.distinctId);
      if (person === undefined) {
        person = mapping.several.get(list.distinctId);
        if (person !== undefined) addTo(several, person, list);
        continue;
      }
      batch.set(person, list);
      size += list.t.length;
      if (size >= batchEvents) {
        yield batch;
        batch = new Map();
        size = 0;
      }
    }
  }
  if (!mapping) await reading; // (no event: nothing left running on the transaction)
  if (batch.size) yield batch;
  if (several.size) yield several;
}

/**
 * Every person with events of `names` (or exposures to the flag) from the experiment's start to
 * `until`, with those events, in batches as a computation from the start reads them (personBatches):
 * the percentile metrics' read (percentile-results.ts), the same on either event store.
 */
export function personBatchesFromStart(
  tx: EntityManager,
  events: EventStore,
  experiment: ExperimentForResults,
  names: string[],
  properties: ExperimentProperty[],
  until: Date,
): AsyncGenerator<Map<string, PersonEvents>> {
  const { projectId, flagKey, startDate } = experiment;
  const filter = { flagKey, events: names, from: startDate, to: until };
  const read = { events, projectId, filter, properties, exposedFrom: startDate.getTime() * 1000 };
  return personBatches(tx, read, BATCH_EVENTS);
}

/** A person's first exposure to one of the variants (epoch microseconds), if any. */
export function firstExposure(list: PersonEvents, variants: readonly string[]): number | undefined {
  for (let x = 0; x < list.exposure.length; x++)
    if (variants.includes(list.exposure[x])) return list.t[list.exposureAt[x]];
  return undefined;
}

/**
 * Each metric's cumulative counts for the days after `base` (from the start when null) up to
 * `until`'s: the persons' events in that range from the event store, folded by person-state.ts's
 * rules into the counts (added to the stored day's) and, with `saveDay`, into each person's state as
 * of that day's end. From a stored day, only persons with events since are read, with their stored
 * state; null when that state is not as of the day (or not of these metrics' fingerprints). From the
 * start, a metric's stored state is dropped when `saveDay` is given (and rebuilt when it is ≥ 0).
 */
async function countsFrom(
  tx: EntityManager,
  events: EventStore,
  experiment: ExperimentForResults,
  metrics: readonly ExperimentMetric[],
  base: StoredBase | null,
  until: Date,
  saveDay: number | null,
  batchEvents = BATCH_EVENTS,
): Promise<(MetricStats[] | Error)[] | null> {
  const firstDay = utcDay(experiment.startDate.getTime());
  const days = until.getTime() > firstDay ? Math.ceil((until.getTime() - firstDay) / DAY) : 0;
  if (base) {
    const headers = await db(tx)
      .selectFrom('experiment_metric_state')
      .select(['metric_uuid', 'fingerprint', sql<string>`day::text`.as('day')])
      .where('experiment_id', '=', experiment.id)
      .execute();
    const current = metrics.every((m) =>
      headers.some((h) => h.metric_uuid === m.uuid && h.fingerprint === m.fingerprint && h.day === base.day),
    );
    if (!current) return null;
  }
  const { shapes, properties, events: names } = readPlan(metrics);
  const { projectId, flagKey } = experiment;
  const lookback = experiment.cupedLookbackDays ?? 0;
  const lookbackMicros = lookback * MICROS_PER_DAY;
  const start = experiment.startDate.getTime() * 1000;
  const window: Window = {
    variants: experiment.variants,
    firstDay: firstDay * 1000,
    baseDay: base ? base.index : -1,
    days,
    saveDay: saveDay !== null && saveDay > (base ? base.index : -1) ? saveDay : null,
    cuped: lookback > 0,
  };
  // From the start, keeping no per-person state: an engine that folds per person itself does it all.
  const inEngine = !base && window.saveDay === null ? engineMetrics(events, shapes) : null;
  if (inEngine && days > 0) {
    const found = await inEngine.fold(projectId, {
      flagKey,
      variants: experiment.variants,
      start: experiment.startDate,
      until,
      firstDay: new Date(firstDay),
      days,
      lookbackDays: lookback,
      metrics: inEngine.metrics,
    });
    return shapes.map((shape, i) => {
      if (shape instanceof Error) return shape;
      const byVariant = new Map<string, Changes>();
      const changesOf = changesByVariant(byVariant, days, shape.events.length);
      for (const c of found[inEngine.place[i]]) {
        const to = changesOf(c.variant);
        for (const key of ['n', 'sum', 'sumSq', 'x', 'xx', 'xy', 'd', 'dd', 'md'] as const) to[key][c.day] += c[key];
        c.steps.forEach((v, k) => {
          to.steps[k][c.day] += v;
        });
      }
      return statsByDay(shape.kind, shape.events.length, window, byVariant);
    });
  }
  // Events are named by their number in the read's names (experimentNames).
  const numbered = experimentNames({ events: names });
  const rules = shapes.map((shape) =>
    shape instanceof Error
      ? null
      : {
          kind: shape.kind,
          events: shape.events.map((name) => numbered.indexOf(name)),
          valueIndex: shape.mathProperty ? properties.findIndex((p) => p.key === shape.mathProperty) : null,
          denominatorIndex: shape.denominatorProperty
            ? properties.findIndex((p) => p.key === shape.denominatorProperty)
            : null,
          math: shape.math ?? null,
          denominatorMath: shape.denominatorMath ?? null,
        },
  );
  const valid = shapes.flatMap((shape, i) => (shape instanceof Error ? [] : [i]));
  // Retention metrics' rules (their own fold: retention-metric.ts).
  const retentionRules = metrics.map((metric): RetentionRule | null => {
    const spec = retentionSpec(metric);
    if (!spec) return null;
    return {
      spec,
      start: spec.startEvent === null ? null : numbered.indexOf(spec.startEvent),
      completion: numbered.indexOf(spec.completionEvent),
    };
  });
  // By an event's name number: the metrics it is an event of.
  const metricsOfName: number[][] = numbered.map(() => []);
  for (const i of valid) for (const name of new Set(rules[i]!.events)) metricsOfName[name].push(i);
  // Each metric's change per day (summed over the batches), from no person yet.
  const totals = rules.map((rule, i) =>
    retentionRules[i]
      ? advanceRetention(retentionRules[i], window, []).changes
      : rule
        ? advance(rule, window, []).changes
        : [],
  );
  if (!base && saveDay !== null)
    for (const metric of metrics) if (metric.uuid) await dropState(tx, experiment.id, metric.uuid);

  /** Folds a batch of persons (each with all their events of the range) into the totals and states. */
  const fold = async (byPerson: Map<string, PersonEvents>) => {
    // Per metric, the persons it concerns (exposed in the range, or with one of its events there)
    // and, from a stored day, their states: a person who only viewed pages since keeps their revenue
    // as it was. Persons in id order (so sums add up in the same order on either engine). From the
    // start only persons exposed in the range count at all.
    const concerned: string[][] = shapes.map(() => []);
    const inOrder = [...byPerson.keys()].map((person) => ({ person, id: Number(person) }));
    for (const { person } of inOrder.sort((a, b) => a.id - b.id)) {
      const list = byPerson.get(person)!;
      if (list.exposure.length) for (const i of valid) concerned[i].push(person);
      else if (base) {
        const mine = new Set<number>();
        for (const name of list.name) for (const i of metricsOfName[name]) mine.add(i);
        for (const i of mine) concerned[i].push(person);
      }
    }
    const states = new Map<string, Map<string, PersonState>>(metrics.map((m) => [m.uuid ?? '', new Map()]));
    for (const [i, metric] of metrics.entries()) {
      if (!base || !concerned[i].length || !metric.uuid) continue;
      const map = states.get(metric.uuid)!;
      for (const slice of slices(concerned[i])) {
        const stored = await db(tx)
          .selectFrom('experiment_person_state')
          .select([
            'person_id',
            'variant',
            sql<number>`${sql.raw(MICROS('first_exposed_at'))}`.as('t0'),
            sql<number | null>`${sql.raw(MICROS('left_at'))}`.as('left_at'),
            'value',
            'denominator',
            'covariate',
            'steps',
          ])
          .where('experiment_id', '=', experiment.id)
          .where('metric_uuid', '=', metric.uuid)
          .where(sql<boolean>`person_id = any(${pgArray(slice)}::bigint[])`)
          .execute();
        for (const r of stored)
          map.set(r.person_id, {
            variant: r.variant,
            t0: r.t0,
            leftAt: r.left_at,
            value: Number(r.value),
            denominator: Number(r.denominator),
            covariate: Number(r.covariate),
            steps: r.steps ?? [],
          });
      }
    }

    // CUPED: each newly exposed person's events of the lookback days before their first exposure.
    // From the start they were read with the rest; from a stored day they are read now, by the
    // person's distinct ids (a person with a state has their covariate in it).
    const pre = new Map<string, PersonEvents>();
    if (lookback > 0) {
      const known = (person: string) => [...states.values()].some((m) => m.has(person));
      const exposed = new Map<string, number>();
      for (const [person, list] of byPerson) {
        const t0 = known(person) ? undefined : firstExposure(list, experiment.variants);
        if (t0 !== undefined) exposed.set(person, t0);
      }
      const earlier = base && exposed.size ? new Map<string, PersonEvents>() : byPerson;
      if (base && exposed.size) {
        // (A loop, not Math.min(...times): a spread of many thousands of arguments overflows the stack.)
        let first = Infinity;
        let lastExposure = -Infinity;
        for (const t0 of exposed.values()) {
          first = Math.min(first, t0);
          lastExposure = Math.max(lastExposure, t0);
        }
        const distinctIds = await distinctIdsOf(tx, projectId, [...exposed.keys()]);
        for (const slice of slices(distinctIds)) {
          const filter = {
            flagKey,
            events: names,
            from: new Date(Math.floor((first - lookbackMicros) / 1000)),
            to: new Date(Math.ceil(lastExposure / 1000) + 1),
            distinctIds: slice,
          };
          for (const [person, list] of await eventsByPerson(tx, {
            events,
            projectId,
            filter,
            properties,
            exposedFrom: Infinity,
          }))
            addTo(earlier, person, list);
        }
      }
      for (const [person, t0] of exposed)
        pre.set(person, within(earlier.get(person) ?? noEventColumns<number | null>(), t0 - lookbackMicros, t0));
    }

    for (const i of valid) {
      const metric = metrics[i];
      const rule = rules[i]!;
      const stateOf = states.get(metric.uuid ?? '')!;
      const last = rule.events.at(-1);
      const covariateOf = (person: string) => {
        const list = pre.get(person);
        if (!list || rule.kind === 'ratio') return 0; // (CUPED adjusts mean and funnel metrics only)
        const valueAt = valuesOf(rule, list);
        // (A math other than total and sum: its aggregate over the lookback days, as PostHog's covariate.)
        const agg = rule.kind === 'mean' && !additive(rule.math) ? aggregate(rule.math!) : null;
        let sum = 0;
        for (let j = 0; j < list.t.length; j++) {
          if (list.name[j] !== last) continue;
          if (rule.kind === 'funnel') return 1;
          if (agg) agg.add(valueAt(j));
          else sum += valueAt(j);
        }
        return agg ? agg.value() : sum;
      };
      const retention = retentionRules[i];
      const { changes, saved } = retention
        ? advanceRetention(
            retention,
            window,
            concerned[i].map((person) => [person, { state: stateOf.get(person), events: byPerson.get(person)! }]),
          )
        : advance(
            rule,
            window,
            concerned[i].map((person) => [
              person,
              {
                state: stateOf.get(person),
                events: byPerson.get(person)!,
                covariate: lookback > 0 ? covariateOf(person) : 0,
              },
            ]),
          );
      totals[i] = totals[i].map((day, d) => ({
        kind: day.kind,
        variants: experiment.variants.map((key, v) => addStats(day.variants[v], changes[d].variants[v], 1, key)),
      }));
      if (window.saveDay !== null && metric.uuid && metric.fingerprint)
        await writeStates(tx, experiment.id, metric.uuid, saved);
    }
  };

  if (days > 0) {
    // From a stored day: the events since (a day or two), at once. From the start: in batches, and
    // the CUPED lookback days before the start too (the covariates' events).
    const from = base ? base.end : new Date(experiment.startDate.getTime() - lookback * DAY);
    const filter = { flagKey, events: names, from, to: until };
    if (base) await fold(await eventsByPerson(tx, { events, projectId, filter, properties, exposedFrom: start }));
    else {
      for await (const batch of personBatches(
        tx,
        { events, projectId, filter, properties, exposedFrom: start },
        batchEvents,
      ))
        await fold(batch);
    }
  }

  const out: (MetricStats[] | Error)[] = [];
  for (const [i, shape] of shapes.entries()) {
    if (shape instanceof Error) {
      out.push(shape);
      continue;
    }
    out.push(
      base
        ? totals[i].map((day) => ({
            kind: day.kind,
            variants: experiment.variants.map((key) => {
              const find = (list: VariantStats[] | undefined) => list?.find((v) => v.key === key);
              return addStats(find(base.counts[i]), find(day.variants), 1, key);
            }),
          }))
        : totals[i],
    );
    const metric = metrics[i];
    if (window.saveDay !== null && metric.uuid && metric.fingerprint)
      await saveStateDay(tx, {
        experimentId: experiment.id,
        uuid: metric.uuid,
        fingerprint: metric.fingerprint,
        end: new Date(firstDay + (window.saveDay + 1) * DAY),
      });
  }
  return out;
}

/** Upserts persons' states of a metric. */
async function writeStates(tx: EntityManager, experimentId: number, uuid: string, states: Map<string, PersonState>) {
  for (const slice of slices([...states])) await writeStateSlice(tx, experimentId, uuid, slice);
}

async function writeStateSlice(tx: EntityManager, experimentId: number, uuid: string, states: [string, PersonState][]) {
  const list = states.map(([person, s]) => ({
    person_id: person,
    variant: s.variant,
    t0: s.t0,
    left_at: s.leftAt,
    value: s.value,
    denominator: s.denominator,
    covariate: s.covariate,
    steps: s.steps.length ? s.steps : null,
  }));
  const micros = (column: string) => sql.raw(`'epoch'::timestamptz + r.${column} * interval '1 microsecond'`);
  await db(tx)
    .insertInto('experiment_person_state')
    .columns([
      'experiment_id',
      'metric_uuid',
      'person_id',
      'variant',
      'first_exposed_at',
      'left_at',
      'value',
      'denominator',
      'covariate',
      'steps',
    ])
    .expression(
      sql`select ${experimentId}::int, ${uuid}::varchar, r.person_id, r.variant, ${micros('t0')}, ${micros('left_at')},
                 r.value, r.denominator, r.covariate, r.steps
            from jsonb_to_recordset(${JSON.stringify(list)}::jsonb)
              as r(person_id bigint, variant text, t0 float8, left_at float8, value float8, denominator float8,
                   covariate float8, steps jsonb)`,
    )
    .onConflict((oc) =>
      oc.columns(['experiment_id', 'metric_uuid', 'person_id']).doUpdateSet((eb) => ({
        variant: eb.ref('excluded.variant'),
        first_exposed_at: eb.ref('excluded.first_exposed_at'),
        left_at: eb.ref('excluded.left_at'),
        value: eb.ref('excluded.value'),
        denominator: eb.ref('excluded.denominator'),
        covariate: eb.ref('excluded.covariate'),
        steps: eb.ref('excluded.steps'),
      })),
    )
    .execute();
}

/** Drops a metric's per-person state (a computation from the start rebuilds it). */
async function dropState(tx: EntityManager, experimentId: number, uuid: string) {
  await db(tx)
    .deleteFrom('experiment_person_state')
    .where('experiment_id', '=', experimentId)
    .where('metric_uuid', '=', uuid)
    .execute();
  await db(tx)
    .deleteFrom('experiment_metric_state')
    .where('experiment_id', '=', experimentId)
    .where('metric_uuid', '=', uuid)
    .execute();
}

/** Records the day (and fingerprint) a metric's per-person state is as of. */
async function saveStateDay(tx: EntityManager, target: SaveTarget) {
  const day = new Date(target.end.getTime() - DAY).toISOString().slice(0, 10);
  await db(tx)
    .insertInto('experiment_metric_state')
    .values({
      experiment_id: target.experimentId,
      metric_uuid: target.uuid,
      fingerprint: target.fingerprint,
      day: sql<string>`${day}::date`,
    })
    .onConflict((oc) =>
      oc.columns(['experiment_id', 'metric_uuid']).doUpdateSet((eb) => ({
        fingerprint: eb.ref('excluded.fingerprint'),
        day: eb.ref('excluded.day'),
        updated_at: sql<Date>`now()`,
      })),
    )
    .execute();
}

/** computeCountsSince, each day analysed (the daily results job). */
export async function computeSeriesSince(
  em: EntityManager,
  events: EventStore,
  experiment: ExperimentForResults,
  metrics: readonly ExperimentMetric[],
  until: Date,
  fromDay: number,
  options: { saveState?: boolean } = {},
): Promise<CountsSince<MetricResult>> {
  const counts = await computeCountsSince(em, events, experiment, metrics, until, fromDay, options);
  return { ...counts, series: analyseSeries(experiment, metrics, counts.series) };
}

interface StoredBase {
  day: string;
  /** Days since the start date's UTC day. */
  index: number;
  end: Date;
  /** The earliest computed_at of its rows. */
  computedAt: Date;
  /** Per metric, in the order asked. */
  counts: VariantStats[][];
}

/**
 * The latest day D before `until`'s day whose rows of every one of `metrics` (current fingerprints,
 * completed) were computed after D ended, with the per-variant counts they hold.
 */
async function storedBase(
  em: EntityManager,
  experiment: ExperimentForResults,
  metrics: readonly ExperimentMetric[],
  until: Date,
): Promise<StoredBase | null> {
  const wanted = metrics.filter((m) => m.uuid && m.fingerprint);
  const uuids = new Set(wanted.map((m) => m.uuid));
  if (!wanted.length || uuids.size !== metrics.length) return null;
  const complete = await db(em)
    .selectFrom('experiment_metric_result')
    .select([sql<string>`day::text`.as('day'), 'metric_uuid'])
    .where('experiment_id', '=', experiment.id)
    .where('status', '=', 'completed')
    .where('result', 'is not', null)
    .where((eb) =>
      eb.or(wanted.map((m) => eb.and([eb('metric_uuid', '=', m.uuid!), eb('fingerprint', '=', m.fingerprint!)]))),
    )
    .where(sql<boolean>`computed_at >= (day + 1)::timestamp at time zone 'UTC'`)
    .where(sql<boolean>`(day + 1)::timestamp at time zone 'UTC' < ${until}`)
    .execute();
  const byDay = Map.groupBy(complete, (r) => r.day);
  const day = [...byDay.keys()]
    .filter((d) => new Set(byDay.get(d)!.map((r) => r.metric_uuid)).size === uuids.size)
    .sort()
    .at(-1);
  if (!day) return null;
  const found = await db(em)
    .selectFrom('experiment_metric_result')
    .select(['metric_uuid', 'result', 'computed_at'])
    .where('experiment_id', '=', experiment.id)
    .where('day', '=', day)
    .where((eb) =>
      eb.or(wanted.map((m) => eb.and([eb('metric_uuid', '=', m.uuid!), eb('fingerprint', '=', m.fingerprint!)]))),
    )
    .execute();
  const firstDay = utcDay(experiment.startDate.getTime());
  const start = Date.parse(`${day}T00:00:00Z`);
  return {
    day,
    index: Math.round((start - firstDay) / DAY),
    end: new Date(start + DAY),
    computedAt: new Date(Math.min(...found.map((r) => new Date(r.computed_at ?? 0).getTime()))),
    counts: metrics.map((m) => storedCounts(found.find((r) => r.metric_uuid === m.uuid)?.result)),
  };
}

/** Why the stored day may no longer be right (see computeCountsSince), or null. */
async function staleSince(
  em: EntityManager,
  events: EventStore,
  experiment: ExperimentForResults,
  metrics: readonly ExperimentMetric[],
  base: StoredBase,
  lateEvents: boolean,
): Promise<RecomputeReason | null> {
  const since = base.computedAt;
  // What changed after the run: `since` is a JS time (milliseconds), while updated_at and created_at
  // have microseconds, so a row written in the run's own millisecond came before its read (it was
  // read). Counting it as later made the run after every recompute recompute again.
  const afterRun = new Date(since.getTime() + 1);
  const deletion = await db(em)
    .selectFrom('async_deletion')
    .select('id')
    .where('project_id', '=', experiment.projectId)
    .where((eb) => eb.or([eb('started_at', '>', since), eb('finished_at', '>', since)]))
    .limit(1)
    .executeTakeFirst();
  if (deletion) return 'deletion';
  const retention = await db(em)
    .selectFrom('retention_run')
    .select('id')
    .where('project_id', '=', experiment.projectId)
    .where('finished_at', '>', since)
    .limit(1)
    .executeTakeFirst();
  if (retention) return 'retention';
  // The events the stored days counted: exposures and these metrics' events before D's end.
  const counted: ExperimentEventFilter = {
    flagKey: experiment.flagKey,
    events: readPlan(metrics).events,
    from: new Date(experiment.startDate.getTime() - (experiment.cupedLookbackDays ?? 0) * DAY),
    to: base.end,
  };
  // A distinct id that got another person since D was computed (a merge or a split), with such
  // events: those count for another person now. Through the index on (updated_at, project_id), then
  // those ids' events.
  const moved = await db(em)
    .selectFrom('person_distinct_id')
    .select('distinct_id')
    .where('project_id', '=', experiment.projectId)
    .where('updated_at', '>=', afterRun)
    .execute();
  for (const slice of slices(moved.map((r) => r.distinct_id)))
    if (await events.hasExperimentEvents(experiment.projectId, { ...counted, distinctIds: slice }))
      return 'persons_merged';
  if (!lateEvents) return null;
  // Such events that reached the store after the run (late data, or shipped to ClickHouse since).
  return (await events.hasExperimentEvents(experiment.projectId, counted, afterRun)) ? 'late_events' : null;
}

const finite = (x: unknown) => (typeof x === 'number' && Number.isFinite(x) ? x : Number(x) || 0);

/** The per-variant counts a stored result holds (its baseline and variant results). */
function storedCounts(result: unknown): VariantStats[] {
  const r = (result ?? {}) as { baseline?: unknown; variant_results?: unknown };
  const list = [r.baseline, ...(Array.isArray(r.variant_results) ? r.variant_results : [])];
  return list
    .filter(
      (v): v is Record<string, unknown> & { key: string } => !!v && typeof (v as { key?: unknown }).key === 'string',
    )
    .map((v) => {
      const stats: VariantStats = {
        key: v.key,
        number_of_samples: finite(v.number_of_samples),
        sum: finite(v.sum),
        sum_squares: finite(v.sum_squares),
      };
      if (Array.isArray(v.step_counts)) stats.step_counts = v.step_counts.map(finite);
      if (v.covariate_sum !== undefined) {
        stats.covariate_sum = finite(v.covariate_sum);
        stats.covariate_sum_squares = finite(v.covariate_sum_squares);
        stats.covariate_sum_product = finite(v.covariate_sum_product);
      }
      if (v.denominator_sum !== undefined) {
        stats.denominator_sum = finite(v.denominator_sum);
        stats.denominator_sum_squares = finite(v.denominator_sum_squares);
        stats.numerator_denominator_sum_product = finite(v.numerator_denominator_sum_product);
      }
      return stats;
    });
}

/** a + sign·b, field by field (missing counts as zero; covariates kept when either has them). */
function addStats(a: VariantStats | undefined, b: VariantStats | undefined, sign: 1 | -1, key: string): VariantStats {
  const steps = (x?: VariantStats) => x?.step_counts ?? [];
  const length = Math.max(steps(a).length, steps(b).length);
  const field = (name: keyof Omit<VariantStats, 'key' | 'step_counts'>) => (a?.[name] ?? 0) + sign * (b?.[name] ?? 0);
  const out: VariantStats = {
    key,
    number_of_samples: field('number_of_samples'),
    sum: field('sum'),
    sum_squares: field('sum_squares'),
  };
  if (length) out.step_counts = Array.from({ length }, (_, i) => (steps(a)[i] ?? 0) + sign * (steps(b)[i] ?? 0));
  if (a?.covariate_sum !== undefined || b?.covariate_sum !== undefined) {
    out.covariate_sum = field('covariate_sum');
    out.covariate_sum_squares = field('covariate_sum_squares');
    out.covariate_sum_product = field('covariate_sum_product');
  }
  if (a?.denominator_sum !== undefined || b?.denominator_sum !== undefined) {
    out.denominator_sum = field('denominator_sum');
    out.denominator_sum_squares = field('denominator_sum_squares');
    out.numerator_denominator_sum_product = field('numerator_denominator_sum_product');
  }
  return out;
}

/**
 * The per-variant counts behind computeExperimentSeries (n, Σv, Σv², funnel steps), per day, from the
 * start. `saveState`: also stores each metric's per-person state as of the end of that day (the
 * metrics need their uuid and fingerprint; see computeCountsSince), in the caller's transaction.
 * `batchEvents`: about how many events a batch of persons folds at once (BATCH_EVENTS).
 */
export async function computeExperimentCounts(
  em: EntityManager,
  events: EventStore,
  experiment: ExperimentForResults,
  metrics: readonly ExperimentMetric[],
  until: Date,
  options: { saveState?: number; batchEvents?: number } = {},
): Promise<(MetricStats[] | Error)[]> {
  return em.transactional(
    async (tx) =>
      (await countsFrom(tx, events, experiment, metrics, null, until, options.saveState ?? null, options.batchEvents))!,
  );
}

/** Where a metric's per-person state is stored as of a day's end. */
interface SaveTarget {
  experimentId: number;
  uuid: string;
  fingerprint: string;
  /** The day's end. */
  end: Date;
}
