// The maths of a mean metric's source, or of a ratio's numerator or denominator (#46): how a person's
// events after their exposure become their one value, as PostHog's experiment engine aggregates them
// (ExperimentMetricMathType; its value and aggregation expressions, read from its source):
// - total: the number of events; sum: Σ of the property (missing or not a number: 0);
// - avg, min, max: the average, least and greatest of the property over the person's events (each
//   missing or non-numeric value counts as 0; no property set: each event is 1); 0 without events;
// - dau: count(distinct person_id) of the person's events: 1 with any event, else 0;
// - unique_session: the number of distinct non-empty `$session_id`s among the person's events;
// - unique_group (group analytics) and hogql (a HogQL expression) are refused with a 400 saying so.
// total and sum add up event by event (person-state.ts's fold as it was); the others keep a small
// aggregate per person, stored with the person's state (experiment_person_state.steps) for the
// daily run: avg [count, Σ], min/max [count, extreme], dau [seen], unique_session the sessions' hashes.

export const METRIC_MATHS = ['total', 'sum', 'avg', 'min', 'max', 'dau', 'unique_session'] as const;
export type MetricMath = (typeof METRIC_MATHS)[number];

/** Maths PostHog's experiments accept that this engine refuses, with why. */
export const REFUSED_MATHS: Record<string, string> = {
  unique_group: 'math unique_group (distinct groups) is not supported: this service has no group analytics.',
  hogql: 'math hogql (a HogQL expression) is not supported: this service does not evaluate HogQL.',
};

/** The property whose values stand for a session (unique_session). */
export const SESSION_PROPERTY = '$session_id';

const PROPERTY_MATHS: readonly string[] = ['sum', 'avg', 'min', 'max'];

interface Source {
  math?: unknown;
  math_property?: unknown;
}

/** A source's math (total when unset), or null when it is not one the engine computes. */
export function mathOf(source: Source): MetricMath | null {
  const math = source.math ?? 'total';
  return typeof math === 'string' && (METRIC_MATHS as readonly string[]).includes(math) ? (math as MetricMath) : null;
}

/**
 * Why a source's math cannot be computed (the 400's detail, naming `where`, e.g. "The ratio metric's
 * numerator"), or null when it can.
 */
export function mathProblem(source: Source, where: string): string | null {
  const math = source.math ?? 'total';
  if (typeof math === 'string' && REFUSED_MATHS[math]) return `${where}: ${REFUSED_MATHS[math]}`;
  if (!mathOf(source)) return `${where} math must be one of ${METRIC_MATHS.join(', ')}.`;
  if (math === 'sum' && (typeof source.math_property !== 'string' || !source.math_property))
    return `${where} sums a property: set its math_property.`;
  if (source.math_property !== undefined && source.math_property !== null && typeof source.math_property !== 'string')
    return `${where} math_property must be a string.`;
  return null;
}

/** The property a source's math reads of its events (null: none, each event is 1). */
export function valueProperty(source: Source): string | null {
  const math = mathOf(source);
  if (math === 'unique_session') return SESSION_PROPERTY;
  return math && PROPERTY_MATHS.includes(math) && typeof source.math_property === 'string' && source.math_property
    ? source.math_property
    : null;
}

/** Whether the math adds up per event (total, sum: the fold's running sum), or keeps an aggregate. */
export const additive = (math: MetricMath | null | undefined) => !math || math === 'total' || math === 'sum';

/**
 * A session id as a number for the fold (whose values are numbers): a 52-bit FNV-1a hash, never 0;
 * null when empty or missing (PostHog counts no empty session).
 */
export function sessionNumber(value: unknown): number | null {
  if (value === null || value === undefined) return null;
  const text = typeof value === 'string' ? value : JSON.stringify(value);
  if (!text) return null;
  let h1 = 0x811c9dc5;
  let h2 = 0x01000193 ^ text.length;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    h1 = Math.imul(h1 ^ c, 0x01000193) >>> 0;
    h2 = Math.imul(h2 ^ c, 0x5bd1e995) >>> 0;
  }
  return (h2 & 0xfffff) * 2 ** 32 + h1 || 1;
}

/** A person's aggregate of a non-additive math: events added one by one, its value, its stored form. */
export interface Aggregate {
  /** Adds an event's value (a number; unique_session: the session's number, 0 when none). */
  add(value: number): void;
  value(): number;
  /** What the person's stored state keeps of it. */
  snapshot(): number[];
}

/** An aggregate of `math` from its stored form (empty: no event yet). */
export function aggregate(math: MetricMath, stored: readonly number[] = []): Aggregate {
  switch (math) {
    case 'unique_session': {
      const seen = new Set(stored);
      return {
        add: (v) => {
          if (v) seen.add(v);
        },
        value: () => seen.size,
        snapshot: () => [...seen],
      };
    }
    case 'dau': {
      let seen = stored[0] ? 1 : 0;
      return {
        add: () => {
          seen = 1;
        },
        value: () => seen,
        snapshot: () => [seen],
      };
    }
    case 'avg': {
      let [count, sum] = stored.length ? stored : [0, 0];
      return {
        add: (v) => {
          count++;
          sum += v;
        },
        value: () => (count ? sum / count : 0),
        snapshot: () => [count, sum],
      };
    }
    default: {
      const max = math === 'max';
      let [count, extreme] = stored.length ? stored : [0, 0];
      return {
        add: (v) => {
          extreme = count === 0 ? v : max ? Math.max(extreme, v) : Math.min(extreme, v);
          count++;
        },
        value: () => (count ? extreme : 0),
        snapshot: () => [count, extreme],
      };
    }
  }
}

/** A ratio's two aggregates in one stored list: [numerator's length, numerator's…, denominator's…]. */
export function joinSnapshots(numerator: number[], denominator: number[]): number[] {
  return [numerator.length, ...numerator, ...denominator];
}

export function splitSnapshots(stored: readonly number[]): [number[], number[]] {
  if (!stored.length) return [[], []];
  const n = stored[0];
  return [stored.slice(1, 1 + n), stored.slice(1 + n)];
}
