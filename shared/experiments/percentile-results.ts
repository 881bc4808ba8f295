// Percentile metrics from events (percentile.ts has the metric and the maths): each day's cumulative
// result, as the other metrics' timeseries. The read is the other metrics' computation from the start
// (results.ts, personBatchesFromStart: the event store's experimentEvents, grouped by distinct id in
// the engine on ClickHouse and by the sorted read on PostgreSQL, then by person through PostgreSQL's
// mapping), and the exposure rules are the mean metric's (person-state.ts, membership): a person counts
// from their first exposure, and on no day from the one they are exposed to a second variant.
//
// A quantile does not add up from one day's change to the next, so a percentile metric is computed
// from the start on every run (the mean metrics continue a stored day): its cost is one read of the
// experiment's events, which the bench (bench/experiment-results.ts) compares with a mean metric's
// backfill of the same events.
import type { EntityManager } from '@mikro-orm/postgresql';
import { type EventStore, experimentNames } from '../events/index.ts';
import { MICROS_PER_DAY, membership } from './person-state.ts';
import { type PercentileArm, type PercentileResult, percentileComparison, percentileShape } from './percentile.ts';
import { type ExperimentForResults, type ExperimentMetric, numericValue, personBatchesFromStart } from './results.ts';

const DAY = 86400_000;

/** An exposed person: their variant (number), the day they enter and the day they leave (or never). */
interface Member {
  variant: number;
  dayIn: number;
  dayOut: number;
}

/**
 * The metric's cumulative result for each of `days` (indexes from the start date's UTC day; day i
 * counts events before the next midnight, the last events before `until`). An Error when the metric
 * is not a valid percentile metric.
 */
export async function computePercentileSeries(
  tx: EntityManager,
  events: EventStore,
  experiment: ExperimentForResults,
  metric: ExperimentMetric,
  until: Date,
  days: readonly number[],
): Promise<PercentileResult[] | Error> {
  const shape = percentileShape(metric);
  if (!shape)
    return new Error('Unsupported metric: a percentile metric needs source.event and a percentile in [0.5, 0.99].');
  const firstDay = Math.floor(experiment.startDate.getTime() / DAY) * DAY * 1000;
  const dayOf = (t: number) => Math.floor((t - firstDay) / MICROS_PER_DAY);
  const names = experimentNames({ events: [shape.event] });
  const target = names.indexOf(shape.event);
  const properties = shape.property ? [{ key: shape.property, events: [shape.event] }] : [];
  const variants = experiment.variants;
  const members: Member[] = [];
  // Per person: their value's changes (day, delta), in day order. Per event: each event's member, day, value.
  const changes: { member: number; day: number; delta: number }[] = [];
  const perEvent = shape.unit === 'per_event';
  const NEVER = Number.MAX_SAFE_INTEGER;
  for await (const batch of personBatchesFromStart(tx, events, experiment, names, properties, until)) {
    // Persons in id order, as the other metrics fold them.
    const persons = [...batch.keys()].sort((a, b) => Number(a) - Number(b));
    for (const person of persons) {
      const list = batch.get(person)!;
      const member = membership(undefined, list, variants);
      if (!member) continue;
      const m = members.length;
      const dayOut = member.leftAt === null ? NEVER : dayOf(member.leftAt);
      members.push({ variant: variants.indexOf(member.variant), dayIn: dayOf(member.t0), dayOut });
      // The property's value of the event at place j (null when it has none or it is not a number).
      let p = 0;
      const valueAt = (j: number): number | null => {
        if (!shape.property) return 1;
        while (p < list.valuedAt.length && list.valuedAt[p] < j) p++;
        if (p === list.valuedAt.length || list.valuedAt[p] !== j) return null;
        const v = list.values[p][0];
        return typeof v === 'number' ? v : numericValue(v);
      };
      for (let j = 0; j < list.t.length; j++) {
        const t = list.t[j];
        if (list.name[j] !== target || t < member.t0) continue;
        const day = dayOf(t);
        if (day >= dayOut) continue;
        const v = valueAt(j);
        if (v === null) continue; // (per event: no value; per person: a sum adds 0)
        changes.push({ member: m, day, delta: v });
      }
    }
  }
  const out: PercentileResult[] = [];
  // Per person, the values grow day by day: the changes in day order, added as the days advance.
  const value = new Float64Array(members.length);
  const byDay = perEvent ? [] : [...changes].sort((a, b) => a.day - b.day);
  let added = 0;
  let lastDay = Number.NEGATIVE_INFINITY;
  for (const d of days) {
    const arms: { values: number[]; clusters: number[]; exposures: number }[] = variants.map(() => ({
      values: [],
      clusters: [],
      exposures: 0,
    }));
    const present = (m: Member) => m.variant >= 0 && m.dayIn <= d && d < m.dayOut;
    for (const m of members) if (present(m)) arms[m.variant].exposures++;
    if (perEvent) {
      for (const c of changes) {
        const m = members[c.member];
        if (c.day <= d && present(m)) {
          arms[m.variant].values.push(c.delta);
          arms[m.variant].clusters.push(c.member);
        }
      }
    } else {
      if (d < lastDay) {
        value.fill(0);
        added = 0;
      }
      lastDay = d;
      for (; added < byDay.length && byDay[added].day <= d; added++) value[byDay[added].member] += byDay[added].delta;
      for (const [i, m] of members.entries()) if (present(m)) arms[m.variant].values.push(value[i]);
    }
    out.push(
      percentileComparison(
        variants.map(
          (key, v): PercentileArm => ({
            key,
            values: arms[v].values,
            ...(perEvent ? { clusters: arms[v].clusters } : {}),
            exposures: arms[v].exposures,
          }),
        ),
        {
          percentile: shape.percentile,
          baselineKey: experiment.baselineKey,
          method: experiment.statsMethod,
          unit: shape.unit,
        },
      ),
    );
  }
  return out;
}
