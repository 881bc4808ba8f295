// The inputs of the person analytics endpoints (funnel steps, funnel correlation, lifecycle), read
// and checked as PostHog takes them; the computing is shared/events/analytics.ts.
import { type FunnelParams, LIFECYCLE_TYPES, type LifecycleType } from '../../shared/events/index.ts';
import { validationError } from '../http/errors.ts';
import { isStorableInstant, parseStorableDate } from '../../shared/platform/time.ts';

const MAX_STEPS = 10;

/** `value[key]` when `value` is an object (a parsed JSON value of any shape), else undefined. */
export const fieldOf = (value: unknown, key: string): unknown =>
  value !== null && typeof value === 'object' ? (value as Record<string, unknown>)[key] : undefined;

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
  const steps = [...value].sort((a, b) => (Number(fieldOf(a, 'order')) || 0) - (Number(fieldOf(b, 'order')) || 0));
  return steps.map((step) => {
    const id = fieldOf(step, 'id') ?? fieldOf(step, 'event');
    if (typeof id !== 'string' || id === '' || id.length > 400)
      throw validationError('Each step needs an event name as "id".', attr);
    return id;
  });
}

/** The funnel of a request (query or body): steps, date range and conversion window. */
export function funnelParams(params: Record<string, unknown>): FunnelParams {
  const windowDays = params.funnel_window_days === undefined ? 14 : Number(params.funnel_window_days);
  if (!Number.isInteger(windowDays) || windowDays < 1 || windowDays > 365)
    throw validationError('funnel_window_days must be 1..365.', 'funnel_window_days');
  return {
    steps: parseEventSteps(params.events),
    from: parseDate(params.date_from, new Date(Date.now() - 7 * 86400_000), 'date_from'),
    to: parseDate(params.date_to, new Date(Date.now() + 60_000), 'date_to'),
    windowDays,
  };
}

/** `funnel_step`: 1..n reached that step; -2..-n dropped off before it. */
export function funnelStep(value: unknown, steps: number): number {
  const step = value === undefined ? 1 : Number(value);
  const k = Math.abs(step);
  if (!Number.isInteger(step) || step === 0 || k > steps || step === -1)
    throw validationError(`funnel_step must be 1..${steps}, or -2..-${steps} for drop-offs.`, 'funnel_step');
  return step;
}

export function lifecycleType(value: unknown): LifecycleType {
  const type = LIFECYCLE_TYPES.find((t) => t === value);
  if (!type)
    throw validationError('lifecycle_type must be one of new, returning, resurrecting, dormant.', 'lifecycle_type');
  return type;
}
