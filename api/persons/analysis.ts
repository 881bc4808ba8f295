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
 * CTEs s1..sN: for each person, the time they reached each step (in order, each within the
 * conversion window of the first step).
 */
export function funnelStepsSql(projectId: number, params: FunnelParams): SqlFragment {
  const ctes: string[] = [];
  const values: unknown[] = [];
  params.steps.forEach((event, i) => {
    if (i === 0) {
      ctes.push(`s1 as (select d.person_id, min(e.timestamp) as t, min(e.timestamp) as start
        from event e join person_distinct_id d on d.project_id = e.project_id and d.distinct_id = e.distinct_id
        where e.project_id = ? and e.event = ? and e.timestamp >= ? and e.timestamp < ? group by d.person_id)`);
      values.push(projectId, event, params.from, params.to);
    } else {
      ctes.push(`s${i + 1} as (select s.person_id, min(e.timestamp) as t, min(s.start) as start from s${i} s
        join person_distinct_id d on d.person_id = s.person_id
        join event e on e.project_id = ? and e.distinct_id = d.distinct_id and e.event = ?
         and e.timestamp >= s.t and e.timestamp <= s.start + make_interval(days => ?) and e.timestamp < ?
        group by s.person_id)`);
      values.push(projectId, event, params.windowDays, params.to);
    }
  });
  return { sql: `with ${ctes.join(', ')}`, params: values };
}

/** Person ids at a funnel step: `step` > 0 reached it; `step` < 0 reached step |step|-1 but not |step|. */
export function funnelPersonIdsSql(projectId: number, params: FunnelParams, step: number): SqlFragment {
  const n = params.steps.length;
  const k = Math.abs(step);
  if (!Number.isInteger(step) || step === 0 || k > n || step === -1)
    throw validationError(`funnel_step must be 1..${n}, or -2..-${n} for drop-offs.`, 'funnel_step');
  const ctes = funnelStepsSql(projectId, params);
  const select =
    step > 0 ? `select person_id from s${k}` : `select person_id from s${k - 1} except select person_id from s${k}`;
  return { sql: `${ctes.sql} ${select}`, params: ctes.params };
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
