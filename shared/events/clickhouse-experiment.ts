// An experiment's computation from the start inside ClickHouse (EventStore.experimentDayChanges): one
// statement folds each exposed person's events for every metric at once (the exposures and the events
// are read once, whatever the metrics) and answers only each metric's change of the per-variant sums
// per day, by the rules of the worker's fold (shared/experiments/person-state.ts,
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
import type { DayChange, ExperimentDayRequest } from './event-store.ts';

const MICROS_PER_DAY = 86_400_000_000;
/** A day after every experiment's last: a person who never leaves. */
const NEVER = 1_000_000;
/** results.ts NUMERIC, for re2: a property's text that is a number. */
const NUMERIC = '^[ \\t\\n\\r\\f\\v]*[-+]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][-+]?[0-9]{1,4})?[ \\t\\n\\r\\f\\v]*$';

export interface DayChangesStatement {
  sql: string;
  params: Record<string, unknown>;
  /** Turns the statement's rows into each metric's changes (in the request's order). */
  read(rows: DayChangeRow[]): DayChange[][];
}

/** A row of the day-changes statement (a DayChange as ClickHouse's JSON gives it, with its metric's place). */
export type DayChangeRow = Omit<DayChange, 'day' | 'sumSq'> & {
  metric: number | string;
  day: number | string;
  sum_sq: number;
};

/** The sums a change moves (DayChange's, without variant, day and steps). */
type Sums = Partial<Record<'n' | 'sum' | 'sumSq' | 'x' | 'xx' | 'xy' | 'd' | 'dd' | 'md', string>>;

/** The statement of the request's metrics. `mapping`: the current distinct id → person mapping (a subquery over {project:Int64}). */
export function dayChangesStatement(
  db: string,
  mapping: string,
  projectId: number,
  request: ExperimentDayRequest,
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
  const range = (from: string) =>
    `timestamp >= fromUnixTimestamp64Micro({${from}:Int64}, 'UTC') AND timestamp < fromUnixTimestamp64Micro({until:Int64}, 'UTC')`;
  // Each exposed person: their variant (the first exposure's), first exposure (t0) and first exposure to
  // another variant (0: none), from each variant's first exposure at or after the start (equal times:
  // by variant name).
  const exposed = `SELECT person_id, arraySort((v, t) -> t, firsts.1, firsts.2)[1] AS variant, arraySort(firsts.2) AS times,
         times[1] AS t0, if(length(times) > 1, times[2], toInt64(0)) AS left_at,
         ${dayOf('t0')} AS day_in, if(left_at = 0, toInt64(${NEVER}), ${dayOf('left_at')}) AS day_out
    FROM (SELECT d.person_id AS person_id, minMap([e.r], [e.t]) AS firsts
            FROM (SELECT distinct_id, ${time} AS t, ${jsonText('properties', "'$feature_flag_response'")} AS r
                    FROM ${db}.events
                   WHERE project_id = {project:Int64} AND event = '$feature_flag_called' AND ${range('start')}
                     AND ${jsonText('properties', "'$feature_flag'")} = {flag:String} AND r IN {variants:Array(String)}) AS e
            INNER JOIN (${mapping}) AS d ON d.distinct_id = e.distinct_id
           GROUP BY person_id)`;
  // The metrics' events in the range (the lookback days before the start too), each once, with its
  // person, kind (its name's place in `names`, from 1) and the values it adds to each metric.
  const names = [
    ...new Set(
      request.metrics.flatMap((m) =>
        m.kind === 'mean' ? [m.event] : m.kind === 'ratio' ? [m.numerator.event, m.denominator.event] : m.events,
      ),
    ),
  ];
  params.names = names;
  const kindOf = (event: string) => names.indexOf(event) + 1;
  const valueColumns: string[] = [];
  /** A column of the value an event adds to `source`: 1 (no property), or its property as a number (else 0); 0 for another name. */
  const valueColumn = (name: string, source: { event: string; property: string | null }) => {
    if (source.property === null) valueColumns.push(`toFloat64(k = ${kindOf(source.event)}) AS ${name}`);
    else {
      params[`${name}_key`] = source.property;
      const text = `${name}_text`;
      const parsed = `toFloat64OrNull(replaceRegexpAll(${text}, '^[ \\t\\n\\r\\f\\v]+|[ \\t\\n\\r\\f\\v]+$', ''))`;
      valueColumns.push(`${jsonText('properties', `{${name}_key:String}`)} AS ${text},
            if(k = ${kindOf(source.event)} AND length(${text}) <= 1000 AND match(${text}, {numeric:String})
               AND isFinite(${parsed}), assumeNotNull(${parsed}), 0) AS ${name}`);
    }
    return `e.${name}`;
  };
  // Counted: from the first exposure on, before the day the person leaves; CUPED: the lookback days before it.
  const counted = `e.t >= x.t0 AND ${dayOf('e.t')} < x.day_out`;
  const before = 'e.t >= x.t0 - {lookback:Int64} AND e.t < x.t0';
  const stepsMax = Math.max(1, ...request.metrics.map((m) => (m.kind === 'funnel' ? m.events.length : 0)));
  /** A change of metric `i` (metric, day, n, Σv, Σv², Σx, Σx², Σxv, Σd, Σd², Σvd, steps): Float64, unnamed sums 0. */
  const change = (i: number, day: string, sums: Sums, steps: string[] = []) =>
    `(toUInt8(${i}), toInt64(${day}), ${(['n', 'sum', 'sumSq', 'x', 'xx', 'xy', 'd', 'dd', 'md'] as const)
      .map((k) => `toFloat64(${sums[k] ?? '0'})`)
      .join(', ')}, [${Array.from({ length: stepsMax }, (_, j) => `toFloat64(${steps[j] ?? '0'})`).join(', ')}])`;
  // Per metric: its aggregates over each person's events (gathered), what is made of them per person,
  // and the person's changes.
  const gathered: string[] = [];
  const perPerson: string[] = [];
  const changes: string[] = [];
  request.metrics.forEach((metric, i) => {
    const m = `m${i}`;
    if (metric.kind === 'mean') {
      // Each day's sum (days with none, or a sum of 0, are left out: they change nothing).
      const v = valueColumn(`${m}_v`, metric);
      gathered.push(
        `sumMapIf([${dayOf('e.t')}], [${v}], ${counted}) AS ${m}_by_day, sumIf(${v}, ${before}) AS ${m}_cx`,
      );
      perPerson.push(`arrayCumSum(${m}_by_day.2) AS ${m}_upto, arraySum(${m}_by_day.2) AS ${m}_total`);
      const [cx, total] = [`${m}_cx`, `${m}_total`];
      changes.push(`[${change(i, 'day_in', { n: '1', x: cx, xx: `${cx} * ${cx}` })}],
        arrayMap((d, v, u) -> ${change(i, 'd', { sum: 'v', sumSq: '2 * (u - v) * v + v * v', xy: `${cx} * v` })}, ${m}_by_day.1, ${m}_by_day.2, ${m}_upto),
        if(day_out < {days:Int64}, [${change(i, 'day_out', { n: '-1', sum: `-${total}`, sumSq: `-${total} * ${total}`, x: `-${cx}`, xx: `-${cx} * ${cx}`, xy: `-${cx} * ${total}` })}], [])`);
    } else if (metric.kind === 'ratio') {
      // Numerator m and denominator d by day; Σm·d grows by m·Δd + d·Δm + Δm·Δd (m and d before the day). No CUPED.
      const [v, w] = [valueColumn(`${m}_v`, metric.numerator), valueColumn(`${m}_w`, metric.denominator)];
      gathered.push(`sumMapIf([${dayOf('e.t')}], [${v}], [${w}], ${counted}) AS ${m}_by_day`);
      perPerson.push(`arrayCumSum(${m}_by_day.2) AS ${m}_upto, arraySum(${m}_by_day.2) AS ${m}_total,
        arrayCumSum(${m}_by_day.3) AS ${m}_wupto, arraySum(${m}_by_day.3) AS ${m}_wtotal`);
      const [total, wtotal] = [`${m}_total`, `${m}_wtotal`];
      changes.push(`[${change(i, 'day_in', { n: '1' })}],
        arrayMap((d, v, u, w, z) -> ${change(i, 'd', {
          sum: 'v',
          sumSq: '2 * (u - v) * v + v * v',
          d: 'w',
          dd: '2 * (z - w) * w + w * w',
          md: '(u - v) * w + (z - w) * v + v * w',
        })}, ${m}_by_day.1, ${m}_by_day.2, ${m}_upto, ${m}_by_day.3, ${m}_wupto),
        if(day_out < {days:Int64}, [${change(i, 'day_out', {
          n: '-1',
          sum: `-${total}`,
          sumSq: `-${total} * ${total}`,
          d: `-${wtotal}`,
          dd: `-${wtotal} * ${wtotal}`,
          md: `-${total} * ${wtotal}`,
        })}], [])`);
    } else {
      const k = metric.events.length;
      const kinds = [...new Set(metric.events.map(kindOf))];
      // Each step is the first event of its name at or after the step before (step 1: the first exposure).
      gathered.push(`arraySort(groupArrayIf((e.t, e.k), e.t >= x.t0 AND e.k IN (${kinds.join(', ')}))) AS ${m}_evs,
        toFloat64(countIf(e.k = ${kindOf(metric.events[k - 1])} AND ${before}) > 0) AS ${m}_cx`);
      const s = (j: number) => `${m}_s${j}`;
      perPerson.push(
        metric.events
          .map((event, j) =>
            j === 0
              ? `arrayFirst(p -> p.2 = ${kindOf(event)}, ${m}_evs).1 AS ${s(0)}`
              : `if(${s(j - 1)} = 0, toInt64(0), arrayFirst(p -> p.1 >= ${s(j - 1)} AND p.2 = ${kindOf(event)}, ${m}_evs).1) AS ${s(j)}`,
          )
          .join(', '),
      );
      // Step j counts on its day if reached before the day the person leaves.
      const reached = metric.events.map((_, j) => `(${s(j)} > 0 AND ${dayOf(s(j))} < day_out)`);
      const cx = `${m}_cx`;
      changes.push(`[${change(i, 'day_in', { n: '1', x: cx, xx: cx })}],
        ${metric.events
          .map(
            (_, j) =>
              `if(${reached[j]}, [${change(
                i,
                dayOf(s(j)),
                { xy: j === k - 1 ? cx : '0' },
                metric.events.map((_, l) => (l === j ? '1' : '0')),
              )}], [])`,
          )
          .join(',\n        ')},
        if(day_out < {days:Int64}, [${change(
          i,
          'day_out',
          { n: '-1', x: `-${cx}`, xy: `-${cx} * ${reached[k - 1]}` },
          reached.map((r) => `-${r}`),
        )}], [])`);
    }
  });
  const events = `SELECT d.person_id AS person_id, e.*
    FROM (SELECT distinct_id, ${time} AS t, toInt64(indexOf({names:Array(String)}, event)) AS k${valueColumns.map((c) => `, ${c}`).join('')}
            FROM ${db}.events
           WHERE project_id = {project:Int64} AND event IN {names:Array(String)} AND ${range('from')}
           LIMIT 1 BY uuid) AS e
    INNER JOIN (${mapping}) AS d ON d.distinct_id = e.distinct_id`;
  const sql = `SELECT c.1 AS metric, variant, c.2 AS day, sum(c.3) AS n, sum(c.4) AS sum, sum(c.5) AS sum_sq, sum(c.6) AS x,
         sum(c.7) AS xx, sum(c.8) AS xy, sum(c.9) AS d, sum(c.10) AS dd, sum(c.11) AS md, sumForEach(c.12) AS steps
    FROM (SELECT variant, day_in, day_out, ${perPerson.join(',\n        ')}, arrayConcat(${changes.join(',\n        ')}) AS cs
            FROM (SELECT x.person_id AS person_id, any(x.variant) AS variant, any(x.t0) AS t0, any(x.day_in) AS day_in,
                         any(x.day_out) AS day_out, ${gathered.join(',\n        ')}
                    FROM (${exposed}) AS x LEFT JOIN (${events}) AS e ON e.person_id = x.person_id
                   GROUP BY x.person_id))
   ARRAY JOIN cs AS c
   WHERE c.2 < {days:Int64}
   GROUP BY metric, variant, day`;
  return {
    sql,
    params,
    read: (rows) =>
      request.metrics.map((metric, i) =>
        rows
          .filter((r) => Number(r.metric) === i)
          .map((r) => ({
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
            steps: metric.kind === 'funnel' ? r.steps.slice(0, metric.events.length).map(Number) : [],
          })),
      ),
  };
}
