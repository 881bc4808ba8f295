// An experiment's computation from the start inside ClickHouse (EventStore.experimentDayChanges): one
// statement per metric folds each exposed person's events in the engine and answers only each day's
// change of the per-variant sums, by the rules of the worker's fold (shared/experiments/person-state.ts,
// which the contract tests hold it to):
// - a person is their distinct ids' person now (the mirror, as every ClickHouse analysis); they enter
//   on the day of their first exposure to one of the flag's variants at or after the start, in that
//   variant, and leave (taking everything they added) on the day of their first exposure to another;
// - a mean counts (or sums the property of) its event's occurrences from the first exposure on, by
//   day, until the day they leave; Σv² grows by each day's own increment (2·v·Δ + Δ²);
// - a ratio does so for its numerator and its denominator, with Σd, Σd² and Σm·d (no CUPED);
// - a funnel's step k is the first event of its name at or after step k−1 (step 1: after the first
//   exposure), counted on its day if that is before the day they leave;
// - CUPED: the mean's value (a funnel: whether its last step's event happened) over the lookback days
//   before the first exposure.
// A property counts as the worker reads it (results.ts numericValue): a JSON number, or a string of
// one (digits, an optional point and exponent, spaces around); anything else adds 0.
// Events are counted once by uuid (a batch the shipper sent twice is one). Two exposures to different
// variants at the very same microsecond are ordered by variant name here (the worker: as read).
import { jsonText } from './clickhouse-filters.ts';
import type { DayChange, EngineMetric, ExperimentDayRequest } from './event-store.ts';

const MICROS_PER_DAY = 86_400_000_000;
/** A day after every experiment's last: a person who never leaves. */
const NEVER = 1_000_000;
/** results.ts NUMERIC, for re2: a property's text that is a number. */
const NUMERIC = '^[ \\t\\n\\r\\f\\v]*[-+]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][-+]?[0-9]{1,4})?[ \\t\\n\\r\\f\\v]*$';

export interface DayChangesStatement {
  sql: string;
  params: Record<string, unknown>;
  /** Turns the statement's rows into the metric's changes. */
  read(rows: DayChangeRow[]): DayChange[];
}

/** A row of a day-changes statement (numbers as ClickHouse's JSON gives them). */
export interface DayChangeRow {
  variant: string;
  day: number | string;
  n: number;
  sum: number;
  sum_sq: number;
  x: number;
  xx: number;
  xy: number;
  d: number;
  dd: number;
  md: number;
  steps: number[];
}

/** The statement of one metric. `mapping`: the current distinct id → person mapping (a subquery over {project:Int64}). */
export function dayChangesStatement(
  db: string,
  mapping: string,
  projectId: number,
  request: ExperimentDayRequest,
  metric: EngineMetric,
): DayChangesStatement {
  const micros = (d: Date) => d.getTime() * 1000;
  const params: Record<string, unknown> = {
    project: projectId,
    flag: request.flagKey,
    variants: request.variants,
    start: micros(request.start),
    until: micros(request.until),
    from: micros(request.start) - request.lookbackDays * MICROS_PER_DAY,
    first: micros(request.firstDay),
    days: request.days,
    lookback: request.lookbackDays * MICROS_PER_DAY,
    numeric: NUMERIC,
  };
  const time = 'toUnixTimestamp64Micro(timestamp)';
  const dayOf = (t: string) => `intDiv(${t} - {first:Int64}, ${MICROS_PER_DAY})`;
  // One read of the range: the flag's exposures (from the start on, to one of its variants) and the
  // metric's events, each once, as (time, kind, value, denominator value, variant): kind 0 is an
  // exposure, k > 0 an event of the k-th name (another flag's call, or an exposure before the start: −1, not read).
  const names =
    metric.kind === 'mean'
      ? [metric.event]
      : metric.kind === 'ratio'
        ? [...new Set([metric.numerator.event, metric.denominator.event])]
        : [...new Set(metric.events)];
  params.names = names;
  params.read = [...names, '$feature_flag_called'];
  /** The value an event of `event` adds: 1 each (no property), or its property as a number (else 0). */
  const valueOf = (name: string, source: { event: string; property: string | null }) => {
    params[`${name}_event`] = source.event;
    if (source.property === null) return `toFloat64(event = {${name}_event:String}) AS ${name}`;
    params[`${name}_key`] = source.property;
    const text = `${name}_text`;
    const parsed = `toFloat64OrNull(replaceRegexpAll(${text}, '^[ \\t\\n\\r\\f\\v]+|[ \\t\\n\\r\\f\\v]+$', ''))`;
    return `${jsonText('properties', `{${name}_key:String}`)} AS ${text},
            if(event = {${name}_event:String} AND length(${text}) <= 1000 AND match(${text}, {numeric:String})
               AND isFinite(${parsed}), assumeNotNull(${parsed}), 0) AS ${name}`;
  };
  const values =
    metric.kind === 'mean'
      ? `${valueOf('vn', metric)}, toFloat64(0) AS vd`
      : metric.kind === 'ratio'
        ? `${valueOf('vn', metric.numerator)}, ${valueOf('vd', metric.denominator)}`
        : 'toFloat64(0) AS vn, toFloat64(0) AS vd';
  // (kind 0, exposures, keep their variant in r; the rest carry the values)
  const response = jsonText('properties', "'$feature_flag_response'");
  // Each event kept as the kind needs it (lean tuples: the grouping copies them): a mean's (time, value),
  // a ratio's (time, numerator's value, denominator's), a funnel's (time, kind).
  const tuple = metric.kind === 'mean' ? '(e.t, e.vn)' : metric.kind === 'ratio' ? '(e.t, e.vn, e.vd)' : '(e.t, e.k)';
  // Each exposed person: their variant (the first exposure's), first exposure (t0) and first exposure
  // to another variant (0: none), from each variant's first exposure (equal times: by variant name);
  // and the metric's events (evs), in time order.
  const persons = `SELECT d.person_id AS person_id, minMapIf([e.r], [e.t], e.k = 0) AS firsts, arraySort(firsts.2) AS times,
         arraySort((v, t) -> t, firsts.1, firsts.2)[1] AS variant, times[1] AS t0, if(length(times) > 1, times[2], toInt64(0)) AS left_at,
         ${dayOf('t0')} AS day_in, if(left_at = 0, toInt64(${NEVER}), ${dayOf('left_at')}) AS day_out,
         arraySort(groupArrayIf(${tuple}, e.k > 0)) AS evs
    FROM (SELECT distinct_id, ${time} AS t,
                 if(event = '$feature_flag_called', ifNull(${response}, ''), '') AS response,
                 multiIf(event = '$feature_flag_called' AND t >= {start:Int64}
                           AND ${jsonText('properties', "'$feature_flag'")} = {flag:String} AND has({variants:Array(String)}, response), toInt64(0),
                         has({names:Array(String)}, event), toInt64(indexOf({names:Array(String)}, event)), toInt64(-1)) AS k,
                 if(k = 0, response, '') AS r, ${values}
            FROM ${db}.events
           WHERE project_id = {project:Int64} AND event IN {read:Array(String)}
             AND timestamp >= fromUnixTimestamp64Micro({from:Int64}, 'UTC') AND timestamp < fromUnixTimestamp64Micro({until:Int64}, 'UTC')
             AND k >= 0
           LIMIT 1 BY uuid) AS e
    INNER JOIN (${mapping}) AS d ON d.distinct_id = e.distinct_id
   GROUP BY person_id
  HAVING notEmpty(times)`;
  const before = 'p.1 >= t0 - {lookback:Int64} AND p.1 < t0';
  /** A change (day, n, Σv, Σv², Σx, Σx², Σxv, Σd, Σd², Σvd, steps), Float64 throughout; unnamed sums are 0. */
  const change = (
    day: string,
    sums: Partial<Record<'n' | 'sum' | 'sumSq' | 'x' | 'xx' | 'xy' | 'd' | 'dd' | 'md', string>>,
    steps: string,
  ) =>
    `(toInt64(${day}), ${(['n', 'sum', 'sumSq', 'x', 'xx', 'xy', 'd', 'dd', 'md'] as const)
      .map((k) => `toFloat64(${sums[k] ?? '0'})`)
      .join(', ')}, ${steps})`;
  // The day's sums of the values counted (from the first exposure, before the day they leave), per day with any.
  // Per day with any, from the running sums at each day's last event (arrays side by side, no array
  // captured inside a lambda: ClickHouse would copy it for every element).
  const daySums = (
    value: string,
    name: string,
  ) => `arrayFilter((c, e) -> e, arrayCumSum(arrayMap(p -> ${value}, counted)), ends) AS ${name}_upto,
        arrayMap((u, w) -> u - w, ${name}_upto, arrayShiftRight(${name}_upto, 1, toFloat64(0))) AS ${name}_day,
        arraySum(arrayMap(p -> ${value}, counted)) AS ${name}_total`;
  const counted = `arrayFilter(p -> p.1 >= t0 AND ${dayOf('p.1')} < day_out, evs) AS counted,
        arrayMap(p -> ${dayOf('p.1')}, counted) AS days,
        arrayMap((d, next) -> d != next, days, arrayShiftLeft(days, 1, toInt64(-1))) AS ends,
        arrayFilter((d, e) -> e, days, ends) AS ds,
        ${daySums('p.2', 'v')}`;
  let perPerson: string;
  let changes: string;
  if (metric.kind === 'mean') {
    const none = "CAST([], 'Array(Float64)')";
    perPerson = `arraySum(arrayMap(p -> p.2, arrayFilter(p -> ${before}, evs))) AS cx, ${counted}`;
    changes = `arrayConcat(
        [${change('day_in', { n: '1', x: 'cx', xx: 'cx * cx' }, none)}],
        arrayMap((d, v, u) -> ${change('d', { sum: 'v', sumSq: '2 * (u - v) * v + v * v', xy: 'cx * v' }, none)}, ds, v_day, v_upto),
        if(day_out < {days:Int64}, [${change('day_out', { n: '-1', sum: '-v_total', sumSq: '-v_total * v_total', x: '-cx', xx: '-cx * cx', xy: '-cx * v_total' }, none)}], []))`;
  } else if (metric.kind === 'ratio') {
    // Numerator m and denominator d by day; Σm·d grows by m·Δd + d·Δm + Δm·Δd (m and d before the day). No CUPED.
    const none = "CAST([], 'Array(Float64)')";
    perPerson = `${counted},
        ${daySums('p.3', 'w')}`;
    changes = `arrayConcat(
        [${change('day_in', { n: '1' }, none)}],
        arrayMap((d, v, u, w, z) -> ${change(
          'd',
          {
            sum: 'v',
            sumSq: '2 * (u - v) * v + v * v',
            d: 'w',
            dd: '2 * (z - w) * w + w * w',
            md: '(u - v) * w + (z - w) * v + v * w',
          },
          none,
        )}, ds, v_day, v_upto, w_day, w_upto),
        if(day_out < {days:Int64}, [${change(
          'day_out',
          {
            n: '-1',
            sum: '-v_total',
            sumSq: '-v_total * v_total',
            d: '-w_total',
            dd: '-w_total * w_total',
            md: '-v_total * w_total',
          },
          none,
        )}], []))`;
  } else {
    const k = metric.events.length;
    // Each step's name as its kind (its place in `names`, from 1).
    const step = (i: number) => names.indexOf(metric.events[i]) + 1;
    const stepTimes = metric.events.map((_, i) =>
      i === 0
        ? `arrayFirst(p -> p.1 >= t0 AND p.2 = ${step(0)}, evs).1 AS s0`
        : `if(s${i - 1} = 0, toInt64(0), arrayFirst(p -> p.1 >= s${i - 1} AND p.2 = ${step(i)}, evs).1) AS s${i}`,
    );
    // Step i counts on its day if reached before the day the person leaves.
    const counts = metric.events.map((_, i) => `(s${i} > 0 AND ${dayOf(`s${i}`)} < day_out)`);
    const oneHot = (i: number) => `[${metric.events.map((_, j) => `toFloat64(${j === i ? 1 : 0})`).join(', ')}]`;
    perPerson = `toFloat64(arrayExists(p -> p.2 = ${step(k - 1)} AND ${before}, evs)) AS cx,
        ${stepTimes.join(',\n        ')}`;
    changes = `arrayConcat(
        [${change('day_in', { n: '1', x: 'cx', xx: 'cx' }, oneHot(-1))}],
        ${metric.events
          .map(
            (_, i) => `if(${counts[i]}, [${change(dayOf(`s${i}`), { xy: i === k - 1 ? 'cx' : '0' }, oneHot(i))}], [])`,
          )
          .join(',\n        ')},
        if(day_out < {days:Int64}, [${change(
          'day_out',
          { n: '-1', x: '-cx', xy: `-cx * ${counts[k - 1]}` },
          `[${counts.map((c) => `-toFloat64(${c})`).join(', ')}]`,
        )}], []))`;
  }
  const sql = `SELECT variant, c.1 AS day, sum(c.2) AS n, sum(c.3) AS sum, sum(c.4) AS sum_sq, sum(c.5) AS x,
         sum(c.6) AS xx, sum(c.7) AS xy, sum(c.8) AS d, sum(c.9) AS dd, sum(c.10) AS md, sumForEach(c.11) AS steps
    FROM (SELECT variant, t0, day_in, day_out, evs, ${perPerson}, ${changes} AS cs FROM (${persons}))
   ARRAY JOIN cs AS c
   WHERE c.1 < {days:Int64}
   GROUP BY variant, day`;
  return {
    sql,
    params,
    read: (rows) =>
      rows.map((r) => ({
        variant: r.variant,
        day: Number(r.day),
        n: Number(r.n),
        sum: Number(r.sum),
        sumSq: Number(r.sum_sq),
        x: Number(r.x),
        xx: Number(r.xx),
        xy: Number(r.xy),
        d: Number(r.d),
        dd: Number(r.dd),
        md: Number(r.md),
        steps: r.steps.map(Number),
      })),
  };
}
