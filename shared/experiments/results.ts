// Computing an experiment metric from events (spec A2–A3): exposures are persons with
// `$feature_flag_called` for the flag (variant from `$feature_flag_response`; persons seen in
// more than one variant are excluded), then the metric over each person's events after their first
// exposure. Results are cumulative from the start date to each day's end, as PostHog's timeseries are.
//
// One statement per metric gives every day of a range in a single pass over the experiment's events:
// it finds, per exposed person, the day they enter (first exposure) and the day they leave (the first
// exposure to a second variant, after which PostHog counts them nowhere), then per-day partial
// aggregates (per person and day for a mean, the time each funnel step is reached for a funnel),
// and adds those up cumulatively per variant. So N days cost about one scan, not N scans from the start.
//
// The daily run continues the stored days instead (computeCountsSince): the latest complete day's
// per-variant sums plus the change since, from the events since then and each of their persons'
// stored state as of that day's end (experiment_person_state, person-state.ts), which the full
// computation also writes, in the same statement as the counts (see there).
import type { EntityManager } from '@mikro-orm/postgresql';
import { type Selectable, sql } from 'kysely';
import { type DB, db } from '../db/kysely.ts';
import { pgArray, rows, run } from '../db/sql.ts';
import {
  advance,
  type EventSince,
  eventValue,
  MICROS_PER_DAY,
  type MetricRule,
  type PersonState,
  type Window,
} from './person-state.ts';
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

/** A metric as stored in experiment.metrics (PostHog's ExperimentMetric: the fields the engine reads). */
export interface ExperimentMetric {
  uuid?: string;
  fingerprint?: string;
  metric_type?: unknown;
  source?: { event?: unknown; math?: unknown; math_property?: unknown } | null;
  series?: unknown;
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
    rollout: Object.fromEntries(
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
// The aggregates of a large experiment spill to disk at the server's default 4 MB; this is per
// sort or hash node of the one statement, inside its own transaction.
const WORK_MEM = '64MB';

const UNSUPPORTED = 'Unsupported metric: mean metrics need source.event; funnel metrics need series of events.';

/** The events a metric counts: mean → one source event; funnel → ordered series of events. */
export function metricShape(
  metric: ExperimentMetric | null | undefined,
): { kind: MetricKind; events: string[]; mathProperty: string | null } | null {
  if (metric?.metric_type === 'mean' && typeof metric.source?.event === 'string') {
    const math = metric.source.math;
    const property = metric.source.math_property;
    const mathProperty = math === 'sum' && typeof property === 'string' ? property : null;
    return { kind: 'mean', events: [metric.source.event], mathProperty };
  }
  const series = metric?.metric_type === 'funnel' && Array.isArray(metric.series) ? metric.series : [];
  const events = series.map((s) => record(s).event);
  if (events.length && events.every((e): e is string => typeof e === 'string')) {
    return { kind: 'funnel', events, mathProperty: null };
  }
  return null;
}

/**
 * A property as a number, null when it is not one. JSON numbers cast directly; strings only after a
 * regex check, so a bad value costs no exception (try_numeric's plpgsql exception block sets up a
 * subtransaction per row, and an actual error costs far more). NaN/Infinity strings and exponents
 * past 4 digits are not numbers here (they would poison the sums or overflow the cast).
 * `prop` is a SQL expression of type jsonb; the result has no placeholders.
 */
export function numericProperty(prop: string): string {
  const re = `'^[[:space:]]*[-+]{0,1}([0-9]+[.]{0,1}[0-9]*|[.][0-9]+)([eE][-+]{0,1}[0-9]{1,4}){0,1}[[:space:]]*$'`;
  const text = `(${prop} #>> '{}')`;
  return `(case jsonb_typeof(${prop}) when 'number' then (${prop})::numeric
    when 'string' then case when length(${text}) <= 1000 and ${text} ~ ${re} then ${text}::numeric end end)`;
}

// Exposed persons with the day (0 = the start date's UTC day) they enter and, if they were exposed
// to a second variant, the day they leave: a temporary table, so every metric of the experiment uses
// one scan of the exposures, and analyzed, so the planner knows its size. Parameters: project, flag
// key, variants (JSON), start, until, project, first day, first day.
const MEMBERS = `create temporary table experiment_members on commit drop as
with per_id as (
  select e.distinct_id, e.properties->>'$feature_flag_response' as variant, min(e.timestamp) as t
    from event e where e.project_id = ? and e.event = '$feature_flag_called' and e.properties->>'$feature_flag' = ?
     and e.properties->>'$feature_flag_response' in (select jsonb_array_elements_text(?::jsonb))
     and e.timestamp >= ? and e.timestamp < ?
   group by 1, 2),
first_seen as (
  select d.person_id, p.variant, min(p.t) as t
    from per_id p join person_distinct_id d on d.project_id = ? and d.distinct_id = p.distinct_id
   group by 1, 2)
select person_id, (array_agg(variant order by t))[1] as variant, min(t) as t0,
       (min(t) at time zone 'UTC')::date - ?::date as day_in,
       (array_agg(t order by t))[2] as t_out,
       ((array_agg(t order by t))[2] at time zone 'UTC')::date - ?::date as day_out
  from first_seen group by person_id`;

/**
 * `ev`: the events of `events` in the range, read once (materialized: a join condition such as
 * "after this person's first exposure" must not turn into one index scan per person), then each
 * event's person and membership. Parameters: project, the events, start, until, project.
 * With a CUPED lookback the range starts that many days earlier, `mev` also keeps each person's
 * events of the lookback days before their first exposure, and `pre` marks those.
 */
const memberEvents = (events: string[], columns: string, lookbackDays = 0) => `ev as materialized (
    select m.distinct_id, m.timestamp as t, ${columns} from event m
     where m.project_id = ? and m.event in (${events.map(() => '?').join(', ')})
       and m.timestamp >= ? and m.timestamp < ?),
  mev as (
    select x.person_id, x.variant, x.day_out, ${lookbackDays ? 'ev.t < x.t0' : 'false'} as pre, ev.* from ev
      join person_distinct_id d on d.project_id = ? and d.distinct_id = ev.distinct_id
      join experiment_members x on x.person_id = d.person_id
     where ev.t >= x.t0${lookbackDays ? ` - interval '${Math.trunc(lookbackDays)} days'` : ''})`;

const dayOf = (t: string) => `((${t}) at time zone 'UTC')::date - ?::date`;

interface Range {
  /** CUPED: days before each person's first exposure whose metric value is the covariate (0: off). */
  lookbackDays: number;
  days: number;
  dayText: string;
  start: Date;
  until: Date;
  projectId: number;
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
  experiment: ExperimentForResults,
  metrics: readonly ExperimentMetric[],
  until: Date,
): Promise<(MetricResult[] | Error)[]> {
  return analyseSeries(experiment, metrics, await computeExperimentCounts(em, experiment, metrics, until));
}

/** Why a run computed from the start rather than from a stored day (null: it did not). */
export type RecomputeReason =
  | 'no_stored_day'
  | 'earlier_days_missing'
  | 'no_person_state'
  | 'late_events'
  | 'deletion'
  | 'retention'
  | 'persons_merged';

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
    const base = await storedBase(tx, experiment, metrics, until);
    let reason: RecomputeReason | null = !base
      ? 'no_stored_day'
      : base.index >= fromDay
        ? 'earlier_days_missing'
        : await staleSince(tx, experiment, metrics, base, options.lateEvents ?? true);
    if (base && !reason) {
      const series = await continueFromState(tx, experiment, metrics, base, until, days, saveDay);
      if (series) return { firstDay: base.index + 1, series, baseDay: base.day, recomputed: null };
      reason = 'no_person_state';
    }
    const series = await computeExperimentCounts(tx, experiment, metrics, until, {
      saveState: saveDay ?? undefined,
    });
    return { firstDay: 0, series, baseDay: null, recomputed: reason ?? 'no_stored_day' };
  });
}

const MICROS = (t: string) => `(extract(epoch from ${t}) * 1000000)::float8`;

/** Exposures of the flag, or events of `events`. Parameters: flag key. */
const relevant = (alias: string, events: string[]) =>
  `(${alias}.event in (${events.map(() => '?').join(', ') || 'null'})
     or (${alias}.event = '$feature_flag_called' and ${alias}.properties->>'$feature_flag' = ?))`;

/**
 * The counts of each day after the stored one, from the per-person state as of its end and the
 * events since (see computeCountsSince); null when the state is not as of that day (or not of these
 * metrics' fingerprints).
 */
async function continueFromState(
  tx: EntityManager,
  experiment: ExperimentForResults,
  metrics: readonly ExperimentMetric[],
  base: StoredBase,
  until: Date,
  days: number,
  saveDay: number | null,
): Promise<(MetricStats[] | Error)[] | null> {
  const headers = await db(tx)
    .selectFrom('experiment_metric_state')
    .select(['metric_uuid', 'fingerprint', sql<string>`day::text`.as('day')])
    .where('experiment_id', '=', experiment.id)
    .execute();
  const current = metrics.every((m) =>
    headers.some((h) => h.metric_uuid === m.uuid && h.fingerprint === m.fingerprint && h.day === base.day),
  );
  if (!current) return null;
  const shapes = metrics.map((metric) => metricShape(metric) ?? new Error(UNSUPPORTED));
  const valid = shapes.filter((s): s is Exclude<typeof s, Error> => !(s instanceof Error));
  const properties = [...new Set(valid.flatMap((s) => (s.mathProperty ? [s.mathProperty] : [])))];
  const events = [...new Set(valid.flatMap((s) => s.events))];
  const { projectId, flagKey } = experiment;
  const valuesOf = (alias: string) =>
    properties.map((_, i) => `, ${numericProperty(`${alias}.p${i}`)}::float8 as v${i}`).join('');
  const toEvent = (r: Record<string, unknown>): EventSince => ({
    event: r.event as string,
    t: r.t as number,
    exposure: (r.exposure as string | null) ?? null,
    values: properties.map((_, i) => (r[`v${i}`] as number | null) ?? null),
  });

  // The events since D's end, each with its person (one read of the range, by event name and time).
  const found = await rows<Record<string, unknown> & { person: string }>(
    tx,
    `select d.person_id::text as person, e.event, e.t, e.exposure${valuesOf('e')}
       from (select m.distinct_id, m.event, ${MICROS('m.timestamp')} as t,
                    case when m.event = '$feature_flag_called' and m.properties->>'$feature_flag' = ?
                         then m.properties->>'$feature_flag_response' end as exposure
                    ${properties.map((_, i) => `, m.properties -> ? as p${i}`).join('')}
               from event m
              where m.project_id = ? and m.timestamp >= ? and m.timestamp < ? and ${relevant('m', events)}
             offset 0) e
       join person_distinct_id d on d.project_id = ? and d.distinct_id = e.distinct_id
      order by e.t`,
    [flagKey, ...properties, projectId, base.end, until, ...events, flagKey, projectId],
  );
  const byPerson = new Map<string, EventSince[]>();
  for (const r of found) {
    const list = byPerson.get(r.person) ?? byPerson.set(r.person, []).get(r.person)!;
    list.push(toEvent(r));
  }
  const persons = [...byPerson.keys()];

  // Per metric, the persons it concerns (exposed since, or with one of its events since) and their
  // states: a person who only viewed pages since keeps their revenue as it was.
  const concerned = shapes.map((shape) =>
    shape instanceof Error
      ? []
      : persons.filter((p) => byPerson.get(p)!.some((e) => e.exposure !== null || shape.events.includes(e.event))),
  );
  const states = new Map<string, Map<string, PersonState>>(metrics.map((m) => [m.uuid ?? '', new Map()]));
  for (const [i, metric] of metrics.entries()) {
    if (!concerned[i].length || !metric.uuid) continue;
    const stored = await db(tx)
      .selectFrom('experiment_person_state')
      .select([
        'person_id',
        'variant',
        sql<number>`${sql.raw(MICROS('first_exposed_at'))}`.as('t0'),
        sql<number | null>`${sql.raw(MICROS('left_at'))}`.as('left_at'),
        'value',
        'covariate',
        'steps',
      ])
      .where('experiment_id', '=', experiment.id)
      .where('metric_uuid', '=', metric.uuid)
      .where(sql<boolean>`person_id = any(${pgArray(concerned[i])}::bigint[])`)
      .execute();
    const map = states.get(metric.uuid)!;
    for (const r of stored)
      map.set(r.person_id, {
        variant: r.variant,
        t0: r.t0,
        leftAt: r.left_at,
        value: Number(r.value),
        covariate: Number(r.covariate),
        steps: r.steps ?? [],
      });
  }

  // CUPED: the lookback days before the first exposure of each person exposed since (no state yet).
  const lookback = experiment.cupedLookbackDays ?? 0;
  const lookbackMicros = lookback * MICROS_PER_DAY;
  const pre = new Map<string, EventSince[]>();
  const firstExposure = new Map<string, number>();
  if (lookback > 0) {
    const known = (person: string) => [...states.values()].some((m) => m.has(person));
    for (const [person, list] of byPerson) {
      if (known(person)) continue;
      const exposed = list.find((e) => e.exposure !== null && experiment.variants.includes(e.exposure));
      if (exposed) firstExposure.set(person, exposed.t);
    }
    if (firstExposure.size) {
      const times = [...firstExposure.values()];
      const from = new Date((Math.min(...times) - lookbackMicros) / 1000 - 1);
      const to = new Date(Math.max(...times) / 1000 + 1);
      const earlier = await rows<Record<string, unknown> & { person: string }>(
        tx,
        `select d.person_id::text as person, e.event, e.t, null as exposure${valuesOf('e')}
           from person_distinct_id d cross join lateral (
             select m.event, ${MICROS('m.timestamp')} as t ${properties.map((_, i) => `, m.properties -> ? as p${i}`).join('')}
               from event m
              where m.project_id = ? and m.distinct_id = d.distinct_id and m.timestamp >= ? and m.timestamp < ?
                and m.event in (${events.map(() => '?').join(', ') || 'null'})
             offset 0) e
          where d.project_id = ? and d.person_id = any(?::bigint[])`,
        [...properties, projectId, from, to, ...events, projectId, pgArray([...firstExposure.keys()])],
      );
      for (const r of earlier) {
        const t0 = firstExposure.get(r.person)!;
        const e = toEvent(r);
        if (e.t >= t0 - lookbackMicros && e.t < t0) (pre.get(r.person) ?? pre.set(r.person, []).get(r.person)!).push(e);
      }
    }
  }

  const window: Window = {
    variants: experiment.variants,
    firstDay: utcDay(experiment.startDate.getTime()) * 1000,
    baseDay: base.index,
    days,
    saveDay: saveDay !== null && saveDay > base.index ? saveDay : null,
    cuped: lookback > 0,
  };
  const out: (MetricStats[] | Error)[] = [];
  for (const [i, shape] of shapes.entries()) {
    if (shape instanceof Error) {
      out.push(shape);
      continue;
    }
    const metric = metrics[i];
    const rule: MetricRule = {
      kind: shape.kind,
      events: shape.events,
      valueIndex: shape.mathProperty ? properties.indexOf(shape.mathProperty) : null,
    };
    const stateOf = states.get(metric.uuid ?? '')!;
    const covariateOf = (person: string) => {
      const list = (pre.get(person) ?? []).filter((e) => e.event === shape.events.at(-1));
      if (shape.kind === 'funnel') return list.length ? 1 : 0;
      return list.reduce((sum, e) => sum + eventValue(rule, e), 0);
    };
    const { changes, saved } = advance(
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
    out.push(
      changes.map((day) => ({
        kind: day.kind,
        variants: experiment.variants.map((key) => {
          const find = (list: VariantStats[] | undefined) => list?.find((v) => v.key === key);
          return addStats(find(base.counts[i]), find(day.variants), 1, key);
        }),
      })),
    );
    if (window.saveDay !== null && metric.uuid && metric.fingerprint) {
      await writeStates(tx, experiment.id, metric.uuid, saved);
      await saveStateDay(tx, {
        experimentId: experiment.id,
        uuid: metric.uuid,
        fingerprint: metric.fingerprint,
        day: window.saveDay,
        end: new Date(utcDay(experiment.startDate.getTime()) + (window.saveDay + 1) * DAY),
      });
    }
  }
  return out;
}

/** Upserts persons' states of a metric. */
async function writeStates(tx: EntityManager, experimentId: number, uuid: string, states: Map<string, PersonState>) {
  if (!states.size) return;
  const list = [...states].map(([person, s]) => ({
    person_id: person,
    variant: s.variant,
    t0: s.t0,
    left_at: s.leftAt,
    value: s.value,
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
      'covariate',
      'steps',
    ])
    .expression(
      sql`select ${experimentId}::int, ${uuid}::varchar, r.person_id, r.variant, ${micros('t0')}, ${micros('left_at')},
                 r.value, r.covariate, r.steps
            from jsonb_to_recordset(${JSON.stringify(list)}::jsonb)
              as r(person_id bigint, variant text, t0 float8, left_at float8, value float8, covariate float8, steps jsonb)`,
    )
    .onConflict((oc) =>
      oc.columns(['experiment_id', 'metric_uuid', 'person_id']).doUpdateSet((eb) => ({
        variant: eb.ref('excluded.variant'),
        first_exposed_at: eb.ref('excluded.first_exposed_at'),
        left_at: eb.ref('excluded.left_at'),
        value: eb.ref('excluded.value'),
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
  experiment: ExperimentForResults,
  metrics: readonly ExperimentMetric[],
  until: Date,
  fromDay: number,
  options: { saveState?: boolean } = {},
): Promise<CountsSince<MetricResult>> {
  const counts = await computeCountsSince(em, experiment, metrics, until, fromDay, options);
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
  const events = [...new Set(metrics.flatMap((m) => metricShape(m)?.events ?? []))];
  const scanFrom = new Date(experiment.startDate.getTime() - (experiment.cupedLookbackDays ?? 0) * DAY);
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
  // A distinct id that got another person since D was computed (a merge or a split), with events of
  // these metrics or exposures before D's end: those count for another person now. Through the index
  // on (project_id, updated_at), then each such id's events through the distinct-id index.
  const moved = await rows(
    em,
    `select 1 from person_distinct_id d
      where d.project_id = ? and d.updated_at >= ?
        and exists (select 1 from event e where e.project_id = d.project_id and e.distinct_id = d.distinct_id
                       and e.timestamp >= ? and e.timestamp < ? and ${relevant('e', events)})
      limit 1`,
    [experiment.projectId, afterRun, scanFrom, base.end, ...events, experiment.flagKey],
  );
  if (moved.length) return 'persons_merged';
  if (!lateEvents) return null;
  // Through the index on created_at: the rows inserted after the run, not the window's.
  const late = await rows(
    em,
    `select 1 from event e where e.created_at >= ? and e.project_id = ? and e.timestamp >= ? and e.timestamp < ?
        and (e.event in (${events.map(() => '?').join(', ') || 'null'})
             or (e.event = '$feature_flag_called' and e.properties->>'$feature_flag' = ?))
      limit 1`,
    [afterRun, experiment.projectId, scanFrom, base.end, ...events, experiment.flagKey],
  );
  return late.length ? 'late_events' : null;
}

const finite = (x: unknown) => (typeof x === 'number' && Number.isFinite(x) ? x : Number(x) || 0);

/** The per-variant counts a stored result holds (its baseline and variant results). */
export function storedCounts(result: unknown): VariantStats[] {
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
      return stats;
    });
}

/** a + sign·b, field by field (missing counts as zero; covariates kept when either has them). */
export function addStats(
  a: VariantStats | undefined,
  b: VariantStats | undefined,
  sign: 1 | -1,
  key: string,
): VariantStats {
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
  return out;
}

/** Where a full computation stores the per-person state as of a day's end (the daily run's). */
interface StateTarget {
  experimentId: number;
  /** The day (index since the start date's UTC day) whose end the state is as of. */
  day: number;
  /** That day's end. */
  end: Date;
}

/**
 * The per-variant counts behind computeExperimentSeries (n, Σv, Σv², funnel steps), per day.
 * `saveState`: also stores each metric's per-person state as of the end of that day (the metrics
 * need their uuid and fingerprint; see continueFromState), in the caller's transaction.
 */
export async function computeExperimentCounts(
  em: EntityManager,
  experiment: ExperimentForResults,
  metrics: readonly ExperimentMetric[],
  until: Date,
  options: { saveState?: number } = {},
): Promise<(MetricStats[] | Error)[]> {
  const start = experiment.startDate;
  const firstDay = Date.UTC(start.getUTCFullYear(), start.getUTCMonth(), start.getUTCDate());
  const days = until.getTime() > firstDay ? Math.ceil((until.getTime() - firstDay) / DAY) : 0;
  const dayText = new Date(firstDay).toISOString().slice(0, 10);
  const lookbackDays = experiment.cupedLookbackDays ?? 0;
  const shapes = metrics.map((metric) => metricShape(metric) ?? new Error(UNSUPPORTED));
  if (days === 0) return shapes.map((shape) => (shape instanceof Error ? shape : []));
  const stateDay = options.saveState;
  const state: StateTarget | null =
    stateDay !== undefined && stateDay >= 0
      ? { experimentId: experiment.id, day: stateDay, end: new Date(firstDay + (stateDay + 1) * DAY) }
      : null;
  return em.transactional(async (tx) => {
    await run(tx, `set local work_mem = '${WORK_MEM}'`);
    const variants = JSON.stringify(experiment.variants);
    const { projectId, flagKey } = experiment;
    const range: Range = { days, dayText, start, until, projectId: experiment.projectId, lookbackDays };
    await run(tx, MEMBERS, [projectId, flagKey, variants, start, until, projectId, dayText, dayText]);
    await run(tx, `analyze experiment_members`);
    const out: (MetricStats[] | Error)[] = [];
    for (const [i, shape] of shapes.entries()) {
      if (shape instanceof Error) {
        out.push(shape);
        continue;
      }
      const { uuid, fingerprint } = metrics[i];
      const save = state && uuid && fingerprint ? { ...state, uuid, fingerprint } : null;
      try {
        // A savepoint each, so a failing metric leaves the transaction usable for the next.
        const series = await tx.transactional(async (inner) => {
          if (stateDay !== undefined && uuid) await dropState(inner, experiment.id, uuid);
          const counts = await metricSeries(inner, experiment, shape, range, save);
          if (save) await saveStateDay(inner, save);
          return counts;
        });
        out.push(series);
      } catch (e) {
        out.push(e as Error);
      }
    }
    return out;
  });
}

/** A mean metric's cumulative sums of a variant at a day with changes. */
interface MeanRow {
  variant: string;
  day: number;
  n: number;
  total: number;
  total_sq: number;
  x: number;
  xx: number;
  xy: number;
}

/** A funnel's change of a count (step ≥ 0, or −1 members, −2 Σx, −3 Σxy) of a variant at a day. */
interface FunnelRow {
  variant: string;
  day: number;
  step: number;
  d: number;
}

type SaveTarget = StateTarget & { uuid: string; fingerprint: string };

/**
 * A full computation's per-person state as of the state day's end, inserted by its statement (a
 * data-modifying CTE: no second pass over the events): every person exposed by then, with the given
 * columns. Parameters: experiment, metric uuid, state day, those of `values` and `joins`, state day.
 */
const savedState = (columns: string, values: string, joins: string) => `,
       saved as (
         insert into experiment_person_state
                (experiment_id, metric_uuid, person_id, variant, first_exposed_at, left_at, ${columns})
         select ?, ?, x.person_id, x.variant, x.t0, case when x.day_out <= ? then x.t_out end, ${values}
           from experiment_members x left join pre p using (person_id) ${joins}
          where x.day_in <= ?
         on conflict do nothing)`;

async function metricSeries(
  em: EntityManager,
  experiment: ExperimentForResults,
  shape: NonNullable<ReturnType<typeof metricShape>>,
  range: Range,
  save: SaveTarget | null,
): Promise<MetricStats[]> {
  const { days, dayText } = range;
  const eventsOf = [...new Set(shape.events)];
  // CUPED: the lookback days before the start are read too.
  const lookback = range.lookbackDays;
  const scanFrom = new Date(range.start.getTime() - lookback * DAY);
  const scan = [range.projectId, ...eventsOf, scanFrom, range.until, range.projectId];
  const cuped = lookback > 0;
  // Per variant, cumulative values per day.
  const n = new Map<string, number[]>();
  const sums = new Map<string, { total: number[]; totalSq: number[]; x: number[]; xx: number[]; xy: number[] }>();
  const steps = new Map<string, number[][]>();
  // Funnel CUPED: Σx and Σxy per variant and day (x is 0/1, so Σx² = Σx).
  const funnelX = new Map<string, number[]>();
  const funnelXY = new Map<string, number[]>();
  const series = <T>(map: Map<string, T>, key: string, make: () => T) => map.get(key) ?? map.set(key, make()).get(key)!;
  const zeros = () => new Array<number>(days).fill(0);

  if (shape.kind === 'mean') {
    const value = shape.mathProperty ? `coalesce(${numericProperty('prop')}, 0)` : '1::numeric';
    // Per person and day the sum of values (before: the person's sum of the days before), then per
    // variant and day the change of n, Σv and Σv²: Σv² grows by (v+δ)² − v² = 2vδ + δ²; a person who
    // leaves takes their whole v and v² with them. Sums stay numeric (exact) until the end.
    // CUPED: each person's covariate x (the same sum over the lookback days before their first
    // exposure) enters and leaves with them, and Σxy grows by x·δ with each increment.
    const found = await rows<MeanRow>(
      em,
      `with ${memberEvents(eventsOf, shape.mathProperty ? 'm.properties -> ? as prop' : 'null::jsonb as prop', lookback)},
       per_day as (
         select person_id, variant, day_out, ${dayOf('t')} as day, sum(${value}) as delta
           from mev where not pre group by 1, 2, 3, 4),
       pre as (select person_id, sum(${value}) as x from mev where pre group by 1),
       increments as (
         select person_id, variant, day, delta,
                coalesce(sum(delta) over (partition by person_id order by day
                                          rows between unbounded preceding and 1 preceding), 0) as before
           from per_day where day_out is null or day < day_out),
       leaving as (
         select x.person_id, x.variant, x.day_out, coalesce(sum(i.delta), 0) as v
           from experiment_members x left join increments i on i.person_id = x.person_id
          where x.day_out is not null group by x.person_id, x.variant, x.day_out),
       changes as (
         select m.variant, m.day_in as day, 1 as dn, 0::numeric as ds, 0::numeric as dq,
                coalesce(p.x, 0) as dx, coalesce(p.x, 0) ^ 2 as dxx, 0::numeric as dxy
           from experiment_members m left join pre p using (person_id)
         union all select i.variant, i.day, 0, i.delta, 2 * i.before * i.delta + i.delta * i.delta,
                0, 0, coalesce(p.x, 0) * i.delta
           from increments i left join pre p using (person_id)
         union all select l.variant, l.day_out, -1, -l.v, -(l.v * l.v),
                -coalesce(p.x, 0), -(coalesce(p.x, 0) ^ 2), -coalesce(p.x, 0) * l.v
           from leaving l left join pre p using (person_id))${
             save
               ? savedState(
                   'value, covariate',
                   'coalesce(s.v, 0), coalesce(p.x, 0)',
                   'left join (select person_id, sum(delta) as v from increments where day <= ? group by 1) s using (person_id)',
                 )
               : ''
           }
       select variant, day, (sum(sum(dn)) over w)::int as n, (sum(sum(ds)) over w)::float8 as total,
              (sum(sum(dq)) over w)::float8 as total_sq, (sum(sum(dx)) over w)::float8 as x,
              (sum(sum(dxx)) over w)::float8 as xx, (sum(sum(dxy)) over w)::float8 as xy
         from changes group by variant, day window w as (partition by variant order by day)`,
      [
        ...(shape.mathProperty ? [shape.mathProperty] : []),
        ...scan,
        dayText,
        ...(save ? [save.experimentId, save.uuid, save.day, save.day, save.day] : []),
      ],
    );
    for (const r of found) {
      // Cumulative values at the days with changes, carried forward to the days after.
      const s = series(sums, r.variant, () => ({
        total: zeros(),
        totalSq: zeros(),
        x: zeros(),
        xx: zeros(),
        xy: zeros(),
      }));
      const c = series(n, r.variant, zeros);
      for (let d = r.day; d < days; d++) {
        c[d] = r.n;
        s.total[d] = r.total;
        s.totalSq[d] = r.total_sq;
        s.x[d] = r.x;
        s.xx[d] = r.xx;
        s.xy[d] = r.xy;
      }
    }
  } else {
    // s_k = the first time of step k at or after step k−1 (s0 = first exposure), from the person's
    // funnel events; a step counts from the day it is reached until the person leaves.
    const ctes = shape.events.map(
      (_, i) => `s${i + 1} as (select s.person_id, min(f.t) as t from s${i} s
         join fe f on f.person_id = s.person_id and f.event = ? and f.t >= s.t group by s.person_id)`,
    );
    const reached = shape.events.map((_, i) => `select ${i} as step, person_id, t from s${i + 1}`).join(' union all ');
    // CUPED (PostHog's): x = 1 when the last step's event happened in the lookback days before the
    // person's first exposure. It counts in Σx while the person is a member (step −2 below), and in
    // Σxy from the day they complete the funnel (step −3).
    const lastStep = shape.events.length - 1;
    const found = await rows<FunnelRow>(
      em,
      `with ${memberEvents(eventsOf, 'm.event', lookback)},
       fe as materialized (select person_id, event, t from mev where not pre),
       pre as (select distinct person_id from mev where pre and event = ?),
       s0 as (select person_id, t0 as t from experiment_members),
       ${ctes.join(',\n')},
       reached as (select r.step, r.person_id, x.variant, ${dayOf('r.t')} as day, x.day_out
                     from (${reached}) r join experiment_members x using (person_id)),
       changes as (
         select variant, day_in as day, -1 as step, 1 as d from experiment_members
         union all select variant, day_out, -1, -1 from experiment_members where day_out is not null
         union all select variant, day, step, 1 from reached where day_out is null or day < day_out
         union all select variant, day_out, step, -1 from reached where day < day_out
         union all select variant, day_in, -2, 1 from experiment_members join pre using (person_id)
         union all select variant, day_out, -2, -1 from experiment_members join pre using (person_id)
                    where day_out is not null
         union all select variant, day, -3, 1 from reached join pre using (person_id)
                    where step = ${lastStep} and (day_out is null or day < day_out)
         union all select variant, day_out, -3, -1 from reached join pre using (person_id)
                    where step = ${lastStep} and day < day_out)${
                      save
                        ? savedState(
                            'covariate, steps',
                            `case when p.person_id is null then 0 else 1 end,
                             to_jsonb(array_remove(array[${shape.events
                               .map((_, i) => `case when s${i + 1}.t < ? then ${MICROS(`s${i + 1}.t`)} end`)
                               .join(', ')}]::float8[], null))`,
                            shape.events.map((_, i) => `left join s${i + 1} using (person_id)`).join(' '),
                          )
                        : ''
                    }
       select variant, day, step, sum(d)::int as d from changes group by 1, 2, 3`,
      [
        ...scan,
        shape.events[lastStep],
        ...shape.events,
        dayText,
        ...(save ? [save.experimentId, save.uuid, save.day, ...shape.events.map(() => save.end), save.day] : []),
      ],
    );
    for (const r of found) {
      const target =
        r.step === -1
          ? series(n, r.variant, zeros)
          : r.step === -2
            ? series(funnelX, r.variant, zeros)
            : r.step === -3
              ? series(funnelXY, r.variant, zeros)
              : series(steps, r.variant, () => shape.events.map(zeros))[r.step];
      for (let d = r.day; d < days; d++) target[d] += r.d;
    }
  }

  const last = shape.events.length - 1;
  return Array.from({ length: days }, (_, d) => {
    // Missing variants count as zero; results follow the flag's variant order.
    const stats: VariantStats[] = experiment.variants.map((key) => {
      if (shape.kind === 'mean') {
        const s = sums.get(key);
        const stats: VariantStats = {
          key,
          number_of_samples: n.get(key)?.[d] ?? 0,
          sum: s?.total[d] ?? 0,
          sum_squares: s?.totalSq[d] ?? 0,
        };
        if (cuped) {
          stats.covariate_sum = s?.x[d] ?? 0;
          stats.covariate_sum_squares = s?.xx[d] ?? 0;
          stats.covariate_sum_product = s?.xy[d] ?? 0;
        }
        return stats;
      }
      const stepCounts = shape.events.map((_, i) => steps.get(key)?.[i][d] ?? 0);
      const reached = stepCounts[last];
      const samples = n.get(key)?.[d] ?? 0;
      const stats: VariantStats = {
        key,
        number_of_samples: samples,
        sum: reached,
        sum_squares: reached,
        step_counts: stepCounts,
      };
      if (cuped) {
        stats.covariate_sum = funnelX.get(key)?.[d] ?? 0;
        stats.covariate_sum_squares = stats.covariate_sum;
        stats.covariate_sum_product = funnelXY.get(key)?.[d] ?? 0;
      }
      return stats;
    });
    return { kind: shape.kind, variants: stats };
  });
}
