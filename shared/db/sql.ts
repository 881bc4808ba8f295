// Helpers for raw SQL through MikroORM's `em.getConnection().execute(sql, params)`.
// Its placeholders are `?`, and an array parameter is expanded into a list (for `in (?)`);
// to pass a PostgreSQL array, send a literal with pgArray() and cast it: `= any(?::int[])`.

/** A PostgreSQL array literal, e.g. pgArray(['a', 'b"c']) → {"a","b\"c"}. */
export function pgArray(values: readonly (string | number)[]): string {
  return `{${values.map((v) => (typeof v === 'number' ? String(v) : `"${String(v).replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`)).join(',')}}`;
}
