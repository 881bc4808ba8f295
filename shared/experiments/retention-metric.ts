// Retention metrics (PostHog's ExperimentRetentionMetric, #46): of the exposed persons who did the
// start event after their first exposure, the share who did the completion event within the
// retention window after it. PostHog's semantics, read from its experiment query builder:
// - the start is the first (`start_handling: first_seen`) or the last (`last_seen`) start event at or
//   after the person's first exposure, and no later than exposure + conversion_window when the metric
//   has one; `start_event: {kind: 'ExperimentExposureNode'}` starts at the first exposure itself;
// - a person is retained when a completion event at or after the start falls in
//   [start + window_start, start + window_end] (both ends included), with both times truncated to
//   the unit's start for `day` and `hour` (UTC here), so [7, 7] days means "on day 7";
// - a person without a start event is not counted at all (not a zero);
// - statistics: a ratio whose numerator is 0/1 and denominator 1 per starter (RatioStatistic: n, Σ, Σ²,
//   Σd, Σd², Σm·d), frequentist and Bayesian as any ratio; PostHog applies no CUPED to them.
// The fold below is person-state.ts's for this kind: per day, a person enters the counts on the day
// of their start event and is retained from the day of a qualifying completion (last_seen: a later
// start event takes it back until a completion qualifies again), and leaves with everything on the
// day they are first exposed to a second variant. The stored state: value = retained (0/1),
// denominator = started (0/1), steps = [the start's time].
import type { MetricKind, VariantStats } from './moments.ts';
import { MICROS_PER_DAY, membership, type PersonEvents, type PersonState, type Window } from './person-state.ts';
import { type CompareOptions, compareVariants, type ExperimentResult } from './stats.ts';

export const RETENTION_UNITS = ['second', 'minute', 'hour', 'day', 'week', 'month'] as const;
export type RetentionUnit = (typeof RETENTION_UNITS)[number];

const UNIT_SECONDS: Record<RetentionUnit, number> = {
  second: 1,
  minute: 60,
  hour: 3600,
  day: 86400,
  week: 7 * 86400,
  month: 30 * 86400,
};
const EXPOSURE_STARTS = ['ExperimentExposureNode', 'ExperimentExposureMetricSource'];

/** A retention metric as the engine reads it. */
export interface RetentionSpec {
  /** The start event's name, or null when the start is the first exposure. */
  startEvent: string | null;
  completionEvent: string;
  windowStart: number;
  windowEnd: number;
  unit: RetentionUnit;
  startHandling: 'first_seen' | 'last_seen';
  /** How long after the first exposure a start event may come (microseconds; null: any time). */
  conversionWindow: number | null;
}

const record = (x: unknown): Record<string, unknown> =>
  x && typeof x === 'object' && !Array.isArray(x) ? (x as Record<string, unknown>) : {};
const isInt = (x: unknown): x is number => typeof x === 'number' && Number.isInteger(x);

/**
 * Why a retention metric (metric_type 'retention') cannot be computed, or null when it can: the
 * detail of the 400 it gets.
 */
export function retentionProblem(metric: unknown): string | null {
  const m = record(metric);
  const start = m.start_event;
  const completion = m.completion_event;
  if (!start || typeof start !== 'object' || Array.isArray(start))
    return 'A retention metric needs a start_event: an EventsNode, or the experiment exposure (ExperimentExposureNode).';
  const s = record(start);
  const exposureStart = typeof s.kind === 'string' && EXPOSURE_STARTS.includes(s.kind);
  if (!exposureStart) {
    if (s.kind !== undefined && s.kind !== 'EventsNode')
      return "The retention metric's start_event must be an EventsNode or ExperimentExposureNode (actions and data warehouse tables are not supported).";
    if (typeof s.event !== 'string' || !s.event) return "The retention metric's start_event needs an event.";
  }
  if (!completion || typeof completion !== 'object' || Array.isArray(completion))
    return 'A retention metric needs a completion_event: an EventsNode.';
  const c = record(completion);
  if (c.kind !== undefined && c.kind !== 'EventsNode')
    return "The retention metric's completion_event must be an EventsNode (actions and data warehouse tables are not supported).";
  if (typeof c.event !== 'string' || !c.event) return "The retention metric's completion_event needs an event.";
  for (const [name, node] of [
    ['start_event', s],
    ['completion_event', c],
  ] as const) {
    if (Array.isArray(node.properties) && node.properties.length)
      return `The retention metric's ${name} has property filters, which are not supported.`;
  }
  if (!isInt(m.retention_window_start) || m.retention_window_start < 0)
    return 'retention_window_start must be an integer ≥ 0.';
  if (!isInt(m.retention_window_end) || m.retention_window_end < m.retention_window_start)
    return 'retention_window_end must be an integer ≥ retention_window_start.';
  if (
    typeof m.retention_window_unit !== 'string' ||
    !RETENTION_UNITS.includes(m.retention_window_unit as RetentionUnit)
  )
    return `retention_window_unit must be one of ${RETENTION_UNITS.join(', ')}.`;
  const handling = m.start_handling ?? 'first_seen';
  if (handling !== 'first_seen' && handling !== 'last_seen') return 'start_handling must be first_seen or last_seen.';
  const hasWindow = m.conversion_window !== undefined && m.conversion_window !== null;
  if (hasWindow) {
    if (!isInt(m.conversion_window) || m.conversion_window <= 0) return 'conversion_window must be a positive integer.';
    if (
      typeof m.conversion_window_unit !== 'string' ||
      !RETENTION_UNITS.includes(m.conversion_window_unit as RetentionUnit)
    )
      return `conversion_window_unit must be one of ${RETENTION_UNITS.join(', ')}.`;
  }
  if (exposureStart && (handling === 'last_seen' || hasWindow))
    return 'A retention metric that starts at the exposure takes neither start_handling last_seen nor a conversion_window.';
  return null;
}

/** The engine's reading of a retention metric, or null when it is not one it can compute. */
export function retentionSpec(metric: unknown): RetentionSpec | null {
  const m = record(metric);
  if (m.metric_type !== 'retention' || retentionProblem(m)) return null;
  const s = record(m.start_event);
  const hasWindow = m.conversion_window !== undefined && m.conversion_window !== null;
  return {
    startEvent: EXPOSURE_STARTS.includes(s.kind as string) ? null : (s.event as string),
    completionEvent: record(m.completion_event).event as string,
    windowStart: m.retention_window_start as number,
    windowEnd: m.retention_window_end as number,
    unit: m.retention_window_unit as RetentionUnit,
    startHandling: m.start_handling === 'last_seen' ? 'last_seen' : 'first_seen',
    conversionWindow: hasWindow
      ? (m.conversion_window as number) * UNIT_SECONDS[m.conversion_window_unit as RetentionUnit] * 1e6
      : null,
  };
}

/** `t` (epoch µs) plus `k` units: calendar months for `month` (as ClickHouse's toIntervalMonth), else fixed lengths. */
function plus(t: number, k: number, unit: RetentionUnit): number {
  if (unit !== 'month') return t + k * UNIT_SECONDS[unit] * 1e6;
  const ms = Math.floor(t / 1000);
  const d = new Date(ms);
  const month = d.getUTCMonth() + k;
  // ClickHouse clamps the day to the target month's last day (Jan 31 + 1 month = Feb 28/29).
  const last = new Date(Date.UTC(d.getUTCFullYear(), month + 1, 0)).getUTCDate();
  const moved = Date.UTC(
    d.getUTCFullYear(),
    month,
    Math.min(d.getUTCDate(), last),
    d.getUTCHours(),
    d.getUTCMinutes(),
    d.getUTCSeconds(),
    d.getUTCMilliseconds(),
  );
  return moved * 1000 + (t - ms * 1000);
}

const truncate = (t: number, unit: RetentionUnit) =>
  unit === 'day'
    ? Math.floor(t / MICROS_PER_DAY) * MICROS_PER_DAY
    : unit === 'hour'
      ? Math.floor(t / 3600e6) * 3600e6
      : t;

/**
 * Whether a completion at `c` retains a person who started at `s` (epoch µs): at or after the start,
 * within the window (truncated to the unit for days and hours, ends included), and no later than the
 * window's end plus one unit of truncation (PostHog's join bound).
 */
export function completes(spec: RetentionSpec, s: number, c: number): boolean {
  if (c < s) return false;
  const buffer = spec.unit === 'day' ? MICROS_PER_DAY : spec.unit === 'hour' ? 3600e6 : 0;
  if (c > s + spec.windowEnd * UNIT_SECONDS[spec.unit] * 1e6 + buffer) return false;
  const ts = truncate(s, spec.unit);
  const tc = truncate(c, spec.unit);
  return tc >= plus(ts, spec.windowStart, spec.unit) && tc <= plus(ts, spec.windowEnd, spec.unit);
}

/** A retention metric's rule in a read: its events as their numbers in the read's names. */
export interface RetentionRule {
  spec: RetentionSpec;
  /** The start event's number (null: the start is the first exposure). */
  start: number | null;
  completion: number;
}

interface Changes {
  n: number[];
  retained: number[];
}

/**
 * One retention metric's cumulative change of the counts per variant for each day after
 * `window.baseDay` (person-state.ts's advance, for this kind), and the new states as of `saveDay`.
 */
export function advanceRetention(
  rule: RetentionRule,
  window: Window,
  persons: Iterable<[string, { state: PersonState | undefined; events: PersonEvents }]>,
): { changes: { kind: MetricKind; variants: VariantStats[] }[]; saved: Map<string, PersonState> } {
  const { spec } = rule;
  const length = Math.max(0, window.days - window.baseDay - 1);
  const byVariant = new Map<string, Changes>();
  const changesOf = (variant: string) => {
    let c = byVariant.get(variant);
    if (!c) {
      c = { n: new Array<number>(length).fill(0), retained: new Array<number>(length).fill(0) };
      byVariant.set(variant, c);
    }
    return c;
  };
  const dayOf = (t: number) => Math.floor((t - window.firstDay) / MICROS_PER_DAY);
  const at = (list: number[], day: number, d: number) => {
    const i = day - window.baseDay - 1;
    if (i >= 0 && i < length) list[i] += d;
  };
  const saved = new Map<string, PersonState>();
  for (const [person, { state, events }] of persons) {
    if (state?.leftAt != null) continue;
    const member = membership(state, events, window.variants);
    if (!member) continue;
    const dayOut = member.leftAt === null ? null : dayOf(member.leftAt);
    const counts = (t: number) => member.leftAt === null || dayOf(t) < dayOut!;
    const c = changesOf(member.variant);
    let started = state ? state.denominator > 0 : false;
    let start = started ? state!.steps[0] : 0;
    let retained = state ? state.value > 0 : false;
    let saveStarted = started;
    let saveStart = start;
    let saveRetained = retained;
    let lastCompletion = -Infinity;
    const keep = (t: number) => {
      if (window.saveDay !== null && dayOf(t) <= window.saveDay) {
        saveStarted = started;
        saveStart = start;
        saveRetained = retained;
      }
    };
    const setRetained = (value: boolean, t: number) => {
      if (value !== retained) at(c.retained, dayOf(t), value ? 1 : -1);
      retained = value;
    };
    const startAt = (t: number) => {
      if (!started) at(c.n, dayOf(t), 1);
      started = true;
      start = t;
      setRetained(lastCompletion === t && completes(spec, t, t), t);
      keep(t);
    };
    const deadline = spec.conversionWindow === null ? Infinity : member.t0 + spec.conversionWindow;
    if (rule.start === null && !started && counts(member.t0) && dayOf(member.t0) > window.baseDay) startAt(member.t0);
    for (let j = 0; j < events.t.length; j++) {
      const t = events.t[j];
      if (t < member.t0 || !counts(t)) continue;
      const name = events.name[j];
      if (name === rule.start && t <= deadline && (!started || spec.startHandling === 'last_seen')) startAt(t);
      if (name === rule.completion) {
        lastCompletion = t;
        if (started && !retained && completes(spec, start, t)) {
          setRetained(true, t);
          keep(t);
        }
      }
    }
    if (dayOut !== null) {
      if (started) at(c.n, dayOut, -1);
      if (retained) at(c.retained, dayOut, -1);
    }
    if (window.saveDay !== null && dayOf(member.t0) <= window.saveDay) {
      const leftAt = dayOut !== null && dayOut <= window.saveDay ? member.leftAt : null;
      const next: PersonState = {
        variant: member.variant,
        t0: member.t0,
        leftAt,
        value: saveRetained ? 1 : 0,
        denominator: saveStarted ? 1 : 0,
        covariate: 0,
        steps: saveStarted ? [saveStart] : [],
      };
      const same =
        state &&
        leftAt === null &&
        next.value === state.value &&
        next.denominator === state.denominator &&
        (next.steps[0] ?? null) === (state.steps[0] ?? null);
      if (!same) saved.set(person, next);
    }
  }
  const cumulative = (list: number[]) => {
    let total = 0;
    return list.map((v) => (total += v));
  };
  const totals = new Map([...byVariant].map(([key, c]) => [key, { n: cumulative(c.n), r: cumulative(c.retained) }]));
  const changes = Array.from({ length }, (_, d) => ({
    kind: 'retention' as MetricKind,
    variants: window.variants.map((key) => {
      const t = totals.get(key);
      return retentionStats({ key, started: t?.n[d] ?? 0, retained: t?.r[d] ?? 0 });
    }),
  }));
  return { changes, saved };
}

/** A variant's retention counts: persons who did the start event, and those of them retained. */
export interface RetentionCounts {
  key: string;
  started: number;
  retained: number;
}

/** The counts as PostHog's RatioStatistic takes them (numerator 0/1, denominator 1 per starter). */
export function retentionStats({ key, started, retained }: RetentionCounts): VariantStats {
  return {
    key,
    number_of_samples: started,
    sum: retained,
    sum_squares: retained,
    denominator_sum: started,
    denominator_sum_squares: started,
    numerator_denominator_sum_product: retained,
  };
}

/**
 * Compares retention between variants as the results do (a pure function, for simulations): each
 * variant's counts as a ratio metric, every variant against `baselineKey`, by `method`. The
 * result's variant_results hold the relative effect's interval (`confidence_interval` or
 * `credible_interval`), `p_value` or `chance_to_win`, and `significant`.
 */
export function retentionComparison(
  variants: readonly RetentionCounts[],
  baselineKey: string,
  method: 'bayesian' | 'frequentist',
  options: CompareOptions = {},
): ExperimentResult {
  return compareVariants(variants.map(retentionStats), baselineKey, 'retention', method, options);
}
