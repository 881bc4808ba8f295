// The fold of experiment results (results.ts, countsFrom): each exposed person's state (none, for a
// computation from the start; as of the stored day's end for the daily run: variant, first exposure,
// exposure to a second variant, running value or funnel steps, CUPED covariate) and their events in
// the range, folded into per-variant, per-day changes of the counts and into the state as of a later
// day's end. The rules: a person enters on the day of their first exposure, counts their events from
// that exposure on, and leaves (taking everything they added) on the day they are first exposed to a
// second variant; a funnel step is the first event of its kind at or after the previous step. Times
// are epoch microseconds (the databases' precision); each person's events are in time order.
import type { EventColumns } from '../events/index.ts';
import { type Aggregate, additive, aggregate, joinSnapshots, type MetricMath, splitSnapshots } from './metric-math.ts';
import type { MetricKind, VariantStats } from './moments.ts';

export const MICROS_PER_DAY = 86400e6;

/** An exposed person's state for one metric as of a day's end. */
export interface PersonState {
  variant: string;
  t0: number;
  /** The first exposure to a second variant, when before the state's day ended. */
  leftAt: number | null;
  /** Mean: the sum of values since the first exposure (up to leaving); ratio: the numerator's. */
  value: number;
  /** Ratio: the denominator's sum of values since the first exposure (up to leaving). */
  denominator: number;
  /** CUPED: the mean's value over the lookback days before t0; a funnel's 0/1. */
  covariate: number;
  /** Funnel: the times the steps were reached, in order (those reached by the state's day). */
  steps: number[];
}

/**
 * A person's events since the stored day, as columns (EventColumns: times, name numbers, exposures by
 * their variant, and the numeric values the mean metrics sum: null when missing or not a number).
 */
export type PersonEvents = EventColumns<number | null>;

export interface MetricRule {
  kind: MetricKind;
  /**
   * Mean: the one event; ratio: the numerator's, then the denominator's; funnel: the steps' events
   * (as their numbers in the read's names).
   */
  events: number[];
  /** Mean (ratio: the numerator): which of the events' values to sum (null: count events). */
  valueIndex: number | null;
  /** Ratio: which of the denominator event's values to sum (null: count events). */
  denominatorIndex?: number | null;
  /** Mean (ratio: the numerator) and the ratio's denominator: maths other than total and sum (metric-math.ts). */
  math?: MetricMath | null;
  denominatorMath?: MetricMath | null;
}

export interface Window {
  variants: readonly string[];
  /** The start date's UTC midnight, in microseconds. */
  firstDay: number;
  /** The stored day (index) the states are as of. */
  baseDay: number;
  /** Days in the range (the last is the one `until` falls in). */
  days: number;
  /** The day whose end the new states are as of (null: none kept). */
  saveDay: number | null;
  cuped: boolean;
}

/** A variant's change of each sum per day (index: the day after the window's base, 0 first). */
export interface Changes {
  n: number[];
  sum: number[];
  sumSq: number[];
  /** Ratio: Σd, Σd², Σm·d. */
  d: number[];
  dd: number[];
  md: number[];
  x: number[];
  xx: number[];
  xy: number[];
  steps: number[][];
}

/**
 * The values `rule` adds of `events`' events, asked in ascending order of place: 1 each when it counts
 * events, else the event's value of its property (0 when it has none).
 */
export function valuesOf(
  rule: MetricRule,
  events: PersonEvents,
  index: number | null | undefined = rule.valueIndex,
): (j: number) => number {
  if (index === null) return () => 1;
  let p = 0;
  return (j) => {
    while (p < events.valuedAt.length && events.valuedAt[p] < j) p++;
    return p < events.valuedAt.length && events.valuedAt[p] === j ? (events.values[p][index] ?? 0) : 0;
  };
}

/**
 * One metric's cumulative change of the counts per variant for each day after `baseDay`, from the
 * persons with events since (each with their state, if they had one, and for a person exposed
 * since, the CUPED covariate of their lookback days), and the new states as of `saveDay`'s end.
 */
export function advance(
  rule: MetricRule,
  window: Window,
  persons: Iterable<[string, { state: PersonState | undefined; events: PersonEvents; covariate: number }]>,
): { changes: { kind: MetricKind; variants: VariantStats[] }[]; saved: Map<string, PersonState> } {
  const length = Math.max(0, window.days - window.baseDay - 1);
  const byVariant = new Map<string, Changes>();
  const changesOf = changesByVariant(byVariant, length, rule.events.length);
  const dayOf = (t: number) => Math.floor((t - window.firstDay) / MICROS_PER_DAY);
  const at = (list: number[], day: number, d: number) => {
    list[day - window.baseDay - 1] += d;
  };
  const saved = new Map<string, PersonState>();
  const last = rule.events.length - 1;
  for (const [person, { state, events, covariate }] of persons) {
    if (state?.leftAt != null) continue; // left before: counts nowhere any more
    const member = membership(state, events, window.variants);
    if (!member) continue;
    const dayIn = dayOf(member.t0);
    const dayOut = member.leftAt === null ? null : dayOf(member.leftAt);
    const counts = (day: number) => dayOut === null || day < dayOut;
    const c = changesOf(member.variant);
    const x = state ? state.covariate : covariate;
    if (!state) {
      at(c.n, dayIn, 1);
      at(c.x, dayIn, x);
      at(c.xx, dayIn, x * x);
    }
    let value = state?.value ?? 0;
    let savedValue = value;
    let denominator = state?.denominator ?? 0;
    let savedDenominator = denominator;
    let steps = state?.steps ?? [];
    // Maths other than total and sum: the person's aggregates (from their state), and what the state
    // keeps of them as of saveDay.
    const [storedN, storedD] = rule.kind === 'ratio' ? splitSnapshots(steps) : [steps, []];
    const aggN: Aggregate | null =
      rule.kind !== 'funnel' && !additive(rule.math) ? aggregate(rule.math!, storedN) : null;
    const aggD: Aggregate | null =
      rule.kind === 'ratio' && !additive(rule.denominatorMath) ? aggregate(rule.denominatorMath!, storedD) : null;
    const snapshot = () =>
      rule.kind === 'ratio' ? joinSnapshots(aggN?.snapshot() ?? [], aggD?.snapshot() ?? []) : (aggN?.snapshot() ?? []);
    let savedSnapshot = aggN || aggD ? steps : null;
    if (rule.kind === 'ratio') {
      // A day's change of the person's numerator m and denominator d moves Σm², Σd² and Σm·d by
      // their own increments, as a mean's Σv².
      const addDay = (day: number, dm: number, dd: number) => {
        at(c.sum, day, dm);
        at(c.sumSq, day, 2 * value * dm + dm * dm);
        at(c.d, day, dd);
        at(c.dd, day, 2 * denominator * dd + dd * dd);
        at(c.md, day, value * dd + denominator * dm + dm * dd);
        value += dm;
        denominator += dd;
        if (window.saveDay !== null && day <= window.saveDay) {
          savedValue = value;
          savedDenominator = denominator;
          if (savedSnapshot) savedSnapshot = snapshot();
        }
      };
      let day = -1;
      let dm = 0;
      let dd = 0;
      const numeratorAt = valuesOf(rule, events);
      const denominatorAt = valuesOf(rule, events, rule.denominatorIndex ?? null);
      const [numeratorEvent, denominatorEvent] = rule.events;
      for (let j = 0; j < events.t.length; j++) {
        const t = events.t[j];
        const name = events.name[j];
        if ((name !== numeratorEvent && name !== denominatorEvent) || t < member.t0) continue;
        const d = dayOf(t);
        if (!counts(d)) continue;
        if (d !== day) {
          if (day >= 0) addDay(day, dm, dd);
          day = d;
          dm = 0;
          dd = 0;
        }
        if (name === numeratorEvent) {
          if (aggN) {
            aggN.add(numeratorAt(j));
            dm = aggN.value() - value;
          } else dm += numeratorAt(j);
        }
        if (name === denominatorEvent) {
          if (aggD) {
            aggD.add(denominatorAt(j));
            dd = aggD.value() - denominator;
          } else dd += denominatorAt(j);
        }
      }
      if (day >= 0) addDay(day, dm, dd);
      if (dayOut !== null) {
        at(c.n, dayOut, -1);
        at(c.sum, dayOut, -value);
        at(c.sumSq, dayOut, -(value * value));
        at(c.d, dayOut, -denominator);
        at(c.dd, dayOut, -(denominator * denominator));
        at(c.md, dayOut, -(value * denominator));
      }
    } else if (rule.kind === 'mean') {
      // Each day's change, in time order (the events are): added up day by day.
      const addDay = (day: number, delta: number) => {
        at(c.sum, day, delta);
        at(c.sumSq, day, 2 * value * delta + delta * delta);
        at(c.xy, day, x * delta);
        value += delta;
        if (window.saveDay !== null && day <= window.saveDay) {
          savedValue = value;
          if (savedSnapshot) savedSnapshot = snapshot();
        }
      };
      let day = -1;
      let delta = 0;
      const valueAt = valuesOf(rule, events);
      const target = rule.events[0];
      for (let j = 0; j < events.t.length; j++) {
        const t = events.t[j];
        if (events.name[j] !== target || t < member.t0) continue;
        const d = dayOf(t);
        if (!counts(d)) continue;
        if (d !== day) {
          if (day >= 0) addDay(day, delta);
          day = d;
          delta = 0;
        }
        if (aggN) {
          aggN.add(valueAt(j));
          delta = aggN.value() - value;
        } else delta += valueAt(j);
      }
      if (day >= 0) addDay(day, delta);
      if (dayOut !== null) {
        at(c.n, dayOut, -1);
        at(c.sum, dayOut, -value);
        at(c.sumSq, dayOut, -(value * value));
        at(c.x, dayOut, -x);
        at(c.xx, dayOut, -(x * x));
        at(c.xy, dayOut, -(x * value));
      }
    } else {
      const had = steps.length;
      steps = [...steps];
      for (let prev = steps.at(-1) ?? member.t0; steps.length < rule.events.length; ) {
        const step = rule.events[steps.length];
        let hit = 0;
        while (hit < events.t.length && (events.name[hit] !== step || events.t[hit] < prev)) hit++;
        if (hit === events.t.length) break;
        steps.push(events.t[hit]);
        prev = events.t[hit];
      }
      for (let k = had; k < steps.length; k++) {
        const day = dayOf(steps[k]);
        if (!counts(day)) continue;
        at(c.steps[k], day, 1);
        if (k === last && x) at(c.xy, day, 1);
      }
      if (dayOut !== null) {
        at(c.n, dayOut, -1);
        if (x) at(c.x, dayOut, -1);
        steps.forEach((t, k) => {
          if (dayOf(t) >= dayOut) return;
          at(c.steps[k], dayOut, -1);
          if (k === last && x) at(c.xy, dayOut, -1);
        });
      }
    }
    if (window.saveDay !== null && dayIn <= window.saveDay) {
      const saveDay = window.saveDay;
      const next: PersonState = {
        variant: member.variant,
        t0: member.t0,
        leftAt: dayOut !== null && dayOut <= saveDay ? member.leftAt : null,
        value: savedValue,
        denominator: savedDenominator,
        covariate: x,
        steps: savedSnapshot ?? steps.filter((t) => dayOf(t) <= saveDay),
      };
      // Only what changed is written (a person whose events are all after the day keeps their row).
      const same =
        state &&
        next.leftAt === null &&
        next.value === state.value &&
        next.denominator === state.denominator &&
        next.steps.length === state.steps.length &&
        (!savedSnapshot || next.steps.every((v, k) => v === state.steps[k]));
      if (!same) saved.set(person, next);
    }
  }
  return { changes: statsByDay(rule.kind, rule.events.length, window, byVariant), saved };
}

/** The Changes of each variant in `byVariant` (made on first use: `length` days of zeros, `steps` funnel steps). */
export function changesByVariant(byVariant: Map<string, Changes>, length: number, steps: number) {
  const zeros = () => new Array<number>(length).fill(0);
  return (variant: string): Changes => {
    let c = byVariant.get(variant);
    if (!c) {
      c = {
        n: zeros(),
        sum: zeros(),
        sumSq: zeros(),
        d: zeros(),
        dd: zeros(),
        md: zeros(),
        x: zeros(),
        xx: zeros(),
        xy: zeros(),
        steps: Array.from({ length: steps }, zeros),
      };
      byVariant.set(variant, c);
    }
    return c;
  };
}

/** Each day's per-variant counts (VariantStats), cumulative, from each variant's changes per day. */
export function statsByDay(
  kind: MetricKind,
  steps: number,
  window: Window,
  byVariant: Map<string, Changes>,
): { kind: MetricKind; variants: VariantStats[] }[] {
  const length = Math.max(0, window.days - window.baseDay - 1);
  const last = steps - 1;
  // Cumulative per day, in the flag's variant order (missing variants: zero).
  const cumulative = (list: number[]) => {
    let total = 0;
    return list.map((v) => (total += v));
  };
  const totals = new Map(
    [...byVariant].map(([key, c]) => [
      key,
      {
        n: cumulative(c.n),
        sum: cumulative(c.sum),
        sumSq: cumulative(c.sumSq),
        d: cumulative(c.d),
        dd: cumulative(c.dd),
        md: cumulative(c.md),
        x: cumulative(c.x),
        xx: cumulative(c.xx),
        xy: cumulative(c.xy),
        steps: c.steps.map(cumulative),
      },
    ]),
  );
  return Array.from({ length }, (_, d) => ({
    kind,
    variants: window.variants.map((key): VariantStats => {
      const t = totals.get(key);
      const total = (name: Exclude<keyof Changes, 'steps'>) => t?.[name][d] ?? 0;
      const stepCounts = Array.from({ length: steps }, (_, k) => t?.steps[k][d] ?? 0);
      const stats: VariantStats =
        kind === 'ratio'
          ? {
              key,
              number_of_samples: total('n'),
              sum: total('sum'),
              sum_squares: total('sumSq'),
              denominator_sum: total('d'),
              denominator_sum_squares: total('dd'),
              numerator_denominator_sum_product: total('md'),
            }
          : kind === 'mean'
            ? { key, number_of_samples: total('n'), sum: total('sum'), sum_squares: total('sumSq') }
            : {
                key,
                number_of_samples: total('n'),
                sum: stepCounts[last],
                sum_squares: stepCounts[last],
                step_counts: stepCounts,
              };
      if (window.cuped && kind !== 'ratio') {
        stats.covariate_sum = total('x');
        stats.covariate_sum_squares = kind === 'mean' ? total('xx') : total('x');
        stats.covariate_sum_product = total('xy');
      }
      return stats;
    }),
  }));
}

/** Who the person is in the experiment now: their state's, or from their exposures since. */
export function membership(
  state: PersonState | undefined,
  events: PersonEvents,
  variants: readonly string[],
): { variant: string; t0: number; leftAt: number | null } | null {
  // Their variant (the state's, or their first exposure's) and when they leave: the first exposure
  // to another variant.
  let variant = state?.variant ?? null;
  let t0 = state?.t0 ?? 0;
  for (let x = 0; x < events.exposure.length; x++) {
    const exposure = events.exposure[x];
    if (!variants.includes(exposure)) continue;
    const t = events.t[events.exposureAt[x]];
    if (variant === null) {
      variant = exposure;
      t0 = t;
    } else if (exposure !== variant) return { variant, t0, leftAt: t };
  }
  return variant === null ? null : { variant, t0, leftAt: null };
}
