// Helpers for raw SQL through MikroORM's `em.getConnection().execute(sql, params)`.
// Its placeholders are `?`, and an array parameter is expanded into a list (for `in (?)`);
// to pass a PostgreSQL array, send a literal with pgArray() and cast it: `= any(?::int[])`.

/** A PostgreSQL array literal, e.g. pgArray(['a', 'b"c']) → {"a","b\"c"}. */
export function pgArray(values: readonly (string | number)[]): string {
  return `{${values.map((v) => (typeof v === 'number' ? String(v) : `"${String(v).replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`)).join(',')}}`;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** Whether `value` can be bound as a uuid parameter (checked first, so a bad id is a 4xx, not a database error). */
export const isUuid = (value: string) => UUID.test(value);

/** An ILIKE pattern matching `text` anywhere, with %, _ and \ in it taken literally. */
export const containsPattern = (text: string) => `%${text.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
