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
