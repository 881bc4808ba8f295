// CSV answers of the person endpoints, one implementation: PostHog's flattened columns (`properties.<key>`,
// `distinct_ids.<n>`, nested keys joined with `.`), sorted. The list export streams page by page so a large
// export never sits in memory; any other endpoint's JSON answer becomes rows through `csvOfAnswer`, which
// the route middleware applies when the query says format=csv.
import type { EntityManager } from '@mikro-orm/postgresql';
import { Readable } from 'node:stream';
import type { SqlFragment } from '../../shared/platform/db/property-filters.ts';
import { csvExtent, type ListKey, personsAfter, propertyPaths } from '../../shared/persons/index.ts';
import { personListRow, type PersonWithIds } from './serializers.ts';

const PAGE = 5000;
type PersonsPage = Awaited<ReturnType<typeof personsAfter>>;

/** The `format` query parameter of every person endpoint (seed: allowed values csv and json). */
export const FORMAT_QUERY = {
  format: { enum: ['json', 'csv'], description: 'csv: the answer as CSV, nested keys flattened to `a.b` columns' },
} as const;

// OWASP's formula-injection guard: a string a spreadsheet would run as a formula gets a leading `'`.
const FORMULA_START = /^[=+\-@\t\r]/;
// A string that is just a decimal number ("-5", "+1.5e3") is read by a spreadsheet as that constant: it
// cannot call a function or reference a cell, so it is left as is rather than turned into the text "'-5".
const PLAIN_NUMBER = /^[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?$/i;

/** A cell, quoted where needed, with formula-looking strings neutralised. Numbers and booleans are data. */
export function csvCell(value: unknown): string {
  if (value === null || value === undefined) return '';
  let text = typeof value === 'object' ? JSON.stringify(value) : String(value);
  if (typeof value === 'string' && FORMULA_START.test(text) && !PLAIN_NUMBER.test(text)) text = `'${text}`;
  return /[",\n\r']/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
}

const csvLine = (cells: unknown[]) => `${cells.map(csvCell).join(',')}\r\n`;

/** Visits the leaves of nested objects and lists as `a.b.0` paths; an empty object or list has no leaf. */
function flatten(value: unknown, prefix: string, leaf: (path: string, value: unknown) => void) {
  if (value && typeof value === 'object') {
    for (const [key, inner] of Object.entries(value)) flatten(inner, prefix ? `${prefix}.${key}` : key, leaf);
  } else {
    leaf(prefix, value);
  }
}

function flatRecord(row: unknown): Record<string, unknown> {
  const flat: Record<string, unknown> = {};
  flatten(row, '', (path, value) => {
    flat[path] = value;
  });
  return flat;
}

/** Rows as CSV: the header is the sorted union of every row's flattened keys; no rows, no CSV. */
export function rowsToCsv(rows: unknown[]): string {
  const flat = rows.map(flatRecord);
  const columns = [...new Set(flat.flatMap((row) => Object.keys(row)))].sort();
  if (!columns.length) return '';
  return csvLine(columns) + flat.map((row) => csvLine(columns.map((c) => row[c]))).join('');
}

/** The rows of a JSON answer: a list, a `{results}` envelope's results, or the one object. */
function answerRows(answer: unknown): unknown[] {
  if (Array.isArray(answer)) return answer;
  const results = answer !== null && typeof answer === 'object' ? (answer as { results?: unknown }).results : undefined;
  return Array.isArray(results) ? results : [answer];
}

/**
 * A route's CSV rendering of its JSON answer (`RouteDefinition.csv`): the rows `rowsOf` picks, flattened.
 * The answer goes through JSON first, so the CSV holds exactly what the JSON answer would (dates as strings).
 * `A` is the shape of the route's own answer (by default, lists by key), as its response schema says.
 */
export const csvOfAnswer =
  <A = Record<string, unknown[]>>(rowsOf: (answer: A) => unknown[] = answerRows) =>
  (answer: unknown): string =>
    rowsToCsv(rowsOf(JSON.parse(JSON.stringify(answer)) as A));

/** A few persons (a retrieve with format=csv) as CSV, with the same columns as the list export. */
export const personsToCsv = (persons: PersonWithIds[]): string => rowsToCsv(persons.map(personListRow));

/**
 * Streams the persons matching `filter` (newest first) as CSV, all of them or the first `limit`, keyset-paged
 * `pageSize` at a time. The header (every column any matching person has) and the row count are read first,
 * in two scans at once. `rows` is the count as the export starts: a person deleted while it runs is left
 * out, one created meanwhile is newer than the first page and not in it. The next page is read while this
 * one is written, so PostgreSQL and the CSV writing overlap.
 */
export async function personsCsv(
  em: EntityManager,
  filter: SqlFragment,
  options: {
    limit?: number;
    pageSize?: number;
    /** Awaited with each page's persons (and its number, from 1) before its rows are written. */
    onPage?: (persons: PersonWithIds[], page: number) => Promise<void>;
  } = {},
): Promise<{ rows: number; stream: Readable }> {
  const limit = options.limit ?? Number.POSITIVE_INFINITY;
  const pageSize = options.pageSize ?? PAGE;
  const [paths, extent] = await Promise.all([propertyPaths(em, filter), csvExtent(em, filter)]);
  const columns = [
    'created_at',
    ...Array.from({ length: Math.min(extent.maxDistinctIds, 1000) }, (_, i) => `distinct_ids.${i}`),
    'id',
    'is_identified',
    'last_seen_at',
    'name',
    ...paths.map((path) => `properties.${path}`),
    'type',
    'uuid',
    'value_at_data_point',
  ].sort();
  const line = csvLineWriter(columns);
  const read = (after: ListKey | null, want: number): Promise<PersonsPage> => {
    const page = personsAfter(em, filter, after, want);
    page.catch(() => {}); // awaited below; a client gone before then must not leave it unhandled
    return page;
  };
  async function* lines() {
    yield csvLine(columns);
    let want: number = Math.min(pageSize, limit);
    let next: Promise<PersonsPage> | null = read(null, want);
    for (let written = 0, pageNumber = 1; next; pageNumber++) {
      const { persons, last }: PersonsPage = await next;
      if (options.onPage && persons.length > 0) await options.onPage(persons, pageNumber);
      written += persons.length;
      const more: boolean = persons.length === want && last !== null && written < limit;
      want = Math.min(pageSize, limit - written);
      next = more ? read(last, want) : null;
      // One chunk per page: a write per line would cost more than the row itself.
      let chunk = '';
      for (const person of persons) chunk += line(personListRow(person));
      if (chunk) yield chunk;
    }
  }
  return { rows: Math.min(extent.persons, limit), stream: Readable.from(lines()) };
}

/** A row's CSV line under fixed `columns`: each leaf goes straight to its cell, leaves without a column are dropped. */
function csvLineWriter(columns: string[]): (row: unknown) => string {
  const at = new Map(columns.map((column, i) => [column, i]));
  return (row) => {
    const cells: unknown[] = new Array(columns.length);
    flatten(row, '', (path, value) => {
      const i = at.get(path);
      if (i !== undefined) cells[i] = value;
    });
    return csvLine(cells);
  };
}
