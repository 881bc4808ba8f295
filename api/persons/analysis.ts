// Persons behind analytics: funnel steps, funnel correlation and lifecycle buckets, computed in SQL
// from events. A person's events are found through its current distinct ids, so merged persons
// count once with all their events.
import type { EntityManager } from '@mikro-orm/postgresql';
import type { SqlFragment } from '../../shared/persons/property-filters.ts';
import { validationError } from '../http/errors.ts';
import { isStorableInstant, parseStorableDate } from '../../shared/time.ts';

export interface FunnelParams {
  steps: string[];
  from: Date;
  to: Date;
  windowDays: number;
}

const MAX_STEPS = 10;

/** Relative (`-7d`, `-2w`, `-1m`, `-24h`) or absolute dates, as PostHog's insight filters take them. */
export function parseDate(value: unknown, fallback: Date, attr: string): Date {
  if (value === undefined || value === null || value === '') return fallback;
  const text = String(value);
  const relative = /^-(\d{1,4})([hdwmy])$/.exec(text);
  if (text === 'all') return new Date(0);
  let date: Date | null;
  if (relative) {
    const n = Number(relative[1]);
    date = new Date();
    if (relative[2] === 'h') date.setUTCHours(date.getUTCHours() - n);
    if (relative[2] === 'd') date.setUTCDate(date.getUTCDate() - n);
    if (relative[2] === 'w') date.setUTCDate(date.getUTCDate() - 7 * n);
    if (relative[2] === 'm') date.setUTCMonth(date.getUTCMonth() - n);
    if (relative[2] === 'y') date.setUTCFullYear(date.getUTCFullYear() - n);
  } else {
    date = parseStorableDate(text);
  }
  // Unreadable, or outside years 1–9999 (`0000-01-01`, `-9999y`): PostgreSQL could not compare it.
  if (!date || !isStorableInstant(date.getTime())) throw validationError(`Invalid date "${text.slice(0, 50)}".`, attr);
  return date;
}

/** `events` as PostHog sends it: a JSON array (string in a query) of `{id: <event name>, order?}`. */
export function parseEventSteps(raw: unknown, attr = 'events'): string[] {
  let value = raw;
  if (typeof raw === 'string') {
    try {
      value = JSON.parse(raw);
    } catch {
      throw validationError('Events must be a JSON array of {"id": "<event name>"} objects.', attr);
    }
  }
  if (!Array.isArray(value) || value.length === 0) throw validationError('At least one event is required.', attr);
  if (value.length > MAX_STEPS) throw validationError(`At most ${MAX_STEPS} steps.`, attr);
  const steps = [...value].sort((a: any, b: any) => (Number(a?.order) || 0) - (Number(b?.order) || 0));
  return steps.map((step: any) => {
    const id = step?.id ?? step?.event;
    if (typeof id !== 'string' || id === '' || id.length > 400)
      throw validationError('Each step needs an event name as "id".', attr);
    return id;
  });
}

/**
 * Each person's funnel level (the furthest step reached) from one scan of the step events in the
 * range, as PostHog counts it: every step-1 event starts an attempt, and an attempt reaches step k
 * when steps 2..k follow in order within the conversion window of its start. Per person, in time
 * order, l_k is the latest start of an attempt that reached step k before the current event (the
 * latest start is the one with the most window left), so each level is one window pass. One event
 * advances an attempt by one step at most: l_k comes from the events strictly before it. Events of
 * equal time are ordered by step, so a step may follow the one before it at the same instant.
 * `extra`: an event name whose occurrence in the range each row also reports (correlation).
 * Columns: person_id, level (0 when only `extra` was seen), extra.
 */
export function funnelLevelsSql(projectId: number, params: FunnelParams, extra: string | null = null): SqlFragment {
  const { steps } = params;
  const n = steps.length;
  const names = [...new Set([...steps, ...(extra === null ? [] : [extra])])];
  const values: unknown[] = [];
  const matches = steps.map((event, i) => {
    values.push(event);
    return `e.event = ? as m${i + 1}`;
  });
  values.push(...steps);
  const ord = `case e.event ${steps.map((_, i) => `when ? then ${i + 1}`).join(' ')} else ${n + 1} end as ord`;
  const extraColumn = extra === null ? 'false as x' : 'e.event = ? as x';
  if (extra !== null) values.push(extra);
  values.push(projectId, names, params.from, params.to);
  const scan = `select d.person_id, e.timestamp as t, ${matches.join(', ')}, ${ord}, ${extraColumn}
      from event e join person_distinct_id d on d.project_id = e.project_id and d.distinct_id = e.distinct_id
     where e.project_id = ? and e.event in (?) and e.timestamp >= ? and e.timestamp < ?`;
  const window =
    'window w as (partition by person_id order by t, ord rows between unbounded preceding and 1 preceding)';
  // a_k: the start of the attempt this event takes to step k (null if it takes none there).
  const within = `make_interval(days => ${Number(params.windowDays)})`;
  const reach = (k: number) =>
    k === 1 ? 'case when m1 then t end' : `case when m${k} and t <= l${k - 1} + ${within} then l${k - 1} end`;
  let q = scan;
  for (let k = 1; k < n; k++) q = `select q.*, max(${reach(k)}) over w as l${k} from (${q}) q ${window}`;
  const level = `case ${Array.from({ length: n }, (_, i) => `when ${reach(n - i)} is not null then ${n - i}`).join(' ')} else 0 end`;
  return {
    sql: `select person_id, max(${level}) as level, bool_or(x) as extra from (${q}) q group by person_id`,
    params: values,
  };
}

/** Person ids at a funnel step: `step` > 0 reached it; `step` < 0 reached step |step|-1 but not |step|. */
export function funnelPersonIdsSql(projectId: number, params: FunnelParams, step: number): SqlFragment {
  const n = params.steps.length;
  const k = Math.abs(step);
  if (!Number.isInteger(step) || step === 0 || k > n || step === -1)
    throw validationError(`funnel_step must be 1..${n}, or -2..-${n} for drop-offs.`, 'funnel_step');
  const levels = funnelLevelsSql(projectId, params);
  const where = step > 0 ? `f.level >= ${k}` : `f.level = ${k - 1}`;
  return { sql: `select f.person_id from (${levels.sql}) f where ${where}`, params: levels.params };
}

/** Persons who reached the last step (or started and did not), and performed `entity` in the range. */
export function funnelCorrelationPersonIdsSql(
  projectId: number,
  params: FunnelParams,
  entity: string,
  converted: boolean,
): SqlFragment {
  const n = params.steps.length;
  const levels = funnelLevelsSql(projectId, params, entity);
  const where = converted ? `f.level = ${n}` : `f.level between 1 and ${n - 1}`;
  return { sql: `select f.person_id from (${levels.sql}) f where f.extra and ${where}`, params: levels.params };
}

/** Lifecycle buckets for a day, by PostHog's definitions (new, returning, resurrecting, dormant). */
export function lifecyclePersonIdsSql(
  projectId: number,
  day: Date,
  type: string,
  event: string | null,
  timezone: string,
): SqlFragment {
  const start = new Date(Date.UTC(day.getUTCFullYear(), day.getUTCMonth(), day.getUTCDate()));
  const active = (
    offsetDays: number,
  ) => `exists (select 1 from person_distinct_id d join event e on e.project_id = d.project_id and e.distinct_id = d.distinct_id
      where d.person_id = p.id and e.project_id = ? ${event ? 'and e.event = ?' : ''}
        and (e.timestamp at time zone ?)::date = (?::date + ${offsetDays}))`;
  const activeParams = () => [projectId, ...(event ? [event] : []), timezone, start.toISOString().slice(0, 10)];
  const createdOn = `(p.created_at at time zone ?)::date = ?::date`;
  const createdBefore = `(p.created_at at time zone ?)::date < ?::date`;
  const date = start.toISOString().slice(0, 10);
  switch (type) {
    case 'new':
      return {
        sql: `select p.id from person p where p.project_id = ? and ${createdOn} and ${active(0)}`,
        params: [projectId, timezone, date, ...activeParams()],
      };
    case 'returning':
      return {
        sql: `select p.id from person p where p.project_id = ? and ${createdBefore} and ${active(0)} and ${active(-1)}`,
        params: [projectId, timezone, date, ...activeParams(), ...activeParams()],
      };
    case 'resurrecting':
      return {
        sql: `select p.id from person p where p.project_id = ? and ${createdBefore} and ${active(0)} and not ${active(-1)}`,
        params: [projectId, timezone, date, ...activeParams(), ...activeParams()],
      };
    case 'dormant':
      return {
        sql: `select p.id from person p where p.project_id = ? and not ${active(0)} and ${active(-1)}`,
        params: [projectId, ...activeParams(), ...activeParams()],
      };
    default:
      throw validationError('lifecycle_type must be one of new, returning, resurrecting, dormant.', 'lifecycle_type');
  }
}

export async function countOf(em: EntityManager, ids: SqlFragment): Promise<number> {
  const [{ count }] = await em
    .getConnection()
    .execute<any[]>(`select count(*)::int as count from (${ids.sql}) x`, ids.params);
  return count;
}
