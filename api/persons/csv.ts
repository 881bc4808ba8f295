// CSV export of person lists: PostHog's flattened columns (`properties.<key>`, `distinct_ids.<n>`),
// sorted, streamed page by page so a large export never sits in memory.
import type { EntityManager } from '@mikro-orm/postgresql';
import { Readable } from 'node:stream';
import type { SqlFragment } from '../../shared/persons/property-filters.ts';
import { NEWEST_FIRST, withDistinctIds } from './queries.ts';
import { personListRow, type PersonWithIds } from './serializers.ts';

export const CSV_EXPORT_LIMIT = 100_000;
const PAGE = 1000;

/** A cell, quoted, with formula-looking values (=, +, -, @) neutralised against spreadsheet injection. */
export function csvCell(value: unknown): string {
  if (value === null || value === undefined) return '';
  let text = typeof value === 'object' ? JSON.stringify(value) : String(value);
  if (/^[=+\-@\t\r]/.test(text)) text = `'${text}`;
  return /[",\n\r']/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
}

function flatten(value: unknown, prefix: string, out: Record<string, unknown>) {
  if (value && typeof value === 'object' && !(Array.isArray(value) && value.length === 0)) {
    for (const [key, inner] of Object.entries(value)) flatten(inner, prefix ? `${prefix}.${key}` : key, out);
  } else if (!Array.isArray(value)) {
    out[prefix] = value;
  }
}

function flatRow(person: PersonWithIds): Record<string, unknown> {
  const flat: Record<string, unknown> = {};
  flatten(personListRow(person), '', flat);
  return flat;
}

/** A few persons (a retrieve with format=csv) as CSV, with the same columns as the list export. */
export function personsToCsv(persons: PersonWithIds[]): string {
  const rows = persons.map(flatRow);
  const columns = [...new Set(rows.flatMap((r) => Object.keys(r)))].sort();
  return [columns, ...rows.map((r) => columns.map((c) => r[c]))].map((cells) => cells.map(csvCell).join(',')).join('\r\n') + '\r\n';
}

/** Streams the persons matching `filter` (newest first) as CSV. */
export async function personsCsv(em: EntityManager, filter: SqlFragment, limit = CSV_EXPORT_LIMIT): Promise<Readable> {
  const conn = em.getConnection();
  // The header is the sorted union of every row's columns, so it is computed before streaming.
  const keys = await conn.execute<{ key: string }[]>(
    `select distinct jsonb_object_keys(p.properties) as key from person p where ${filter.sql}`,
    filter.params,
  );
  const [{ max_ids }] = await conn.execute<{ max_ids: number }[]>(
    `select coalesce(max(n), 0)::int as max_ids from (select count(*) as n from person_distinct_id d join person p on p.id = d.person_id where ${filter.sql} group by d.person_id) c`,
    filter.params,
  );
  const columns = [
    'created_at', ...Array.from({ length: Math.min(max_ids, 1000) }, (_, i) => `distinct_ids.${i}`), 'id', 'is_identified', 'last_seen_at', 'name',
    ...keys.map((k) => `properties.${k.key}`), 'type', 'uuid', 'value_at_data_point',
  ].sort();
  async function* rows() {
    yield columns.map(csvCell).join(',') + '\r\n';
    for (let offset = 0; offset < limit; offset += PAGE) {
      const page = await withDistinctIds(
        em,
        `select p.* from person p where ${filter.sql} order by p.created_at desc, p.id desc limit ? offset ?`,
        [...filter.params, Math.min(PAGE, limit - offset), offset],
        NEWEST_FIRST,
      );
      for (const person of page) {
        const flat = flatRow(person);
        yield columns.map((c) => csvCell(flat[c])).join(',') + '\r\n';
      }
      if (page.length < PAGE) return;
    }
  }
  return Readable.from(rows());
}
