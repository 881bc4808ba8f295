/**
 * PostHog's timestamp format: ISO-8601 UTC with `Z`, microseconds only when non-zero
 * (`2024-02-10T00:00:00Z`, `2024-02-10T10:23:00.123000Z`).
 */
export function isoTimestamp(value: Date | string | null | undefined): string | null {
  if (value === null || value === undefined) return null;
  const date = value instanceof Date ? value : new Date(value);
  const iso = date.toISOString(); // 2024-02-10T10:23:00.123Z
  const millis = iso.slice(20, 23);
  return millis === '000' ? `${iso.slice(0, 19)}Z` : `${iso.slice(0, 19)}.${millis}000Z`;
}

// The instants both PostgreSQL's date types and a four-digit ISO-8601 year can hold: years 1–9999 (UTC).
const FIRST_INSTANT_MS = Date.parse('0001-01-01T00:00:00Z');
const LAST_INSTANT_MS = Date.parse('9999-12-31T23:59:59.999Z');

/** Whether `ms` (since the epoch) falls within years 1–9999 UTC, so it can be stored and printed as ISO-8601. */
export const isStorableInstant = (ms: number) => Number.isFinite(ms) && ms >= FIRST_INSTANT_MS && ms <= LAST_INSTANT_MS;

/** A date sent by a client (anything Date.parse reads), or null when unreadable or outside years 1–9999. */
export function parseStorableDate(text: string): Date | null {
  const ms = Date.parse(text);
  return isStorableInstant(ms) ? new Date(ms) : null;
}
