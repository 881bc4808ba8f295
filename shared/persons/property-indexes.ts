// Indexes on one person property, for filters no general index serves: numeric comparisons (gt, gte, lt,
// lte, between) through a btree on the property read as a number, substring and pattern matches
// (icontains, regex) through a trigram index on its text, and date comparisons (is_date_before, _after,
// _exact) through a btree on the property read as an ISO date. PostHog's answer to the same problem is a
// materialized column chosen per hot property; here an operator picks the keys (`npm run manage --
// property index`). Each index costs every person write that touches the table, so none is made by default.
import type { EntityManager } from '@mikro-orm/postgresql';
import { createHash } from 'node:crypto';
import { rows, run } from '../platform/db/sql.ts';

export const PROPERTY_INDEX_KINDS = ['number', 'text', 'date'] as const;
export type PropertyIndexKind = (typeof PROPERTY_INDEX_KINDS)[number];

// The expressions are the ones property-filters.ts writes (`try_numeric((p.properties->>'k'))`,
// `(p.properties->>'k') ilike …`), so the planner can match them; project_id leads, as every list filters by it.
// A date is two indexes: the ISO dates (read without the session, so indexable), and the persons holding
// anything else under the key, which the filter reads with try_timestamptz (a handful, usually).
const METHODS: Record<PropertyIndexKind, string[]> = {
  number: ['btree (project_id, try_numeric((properties->>?)))'],
  text: ['gin (project_id, (properties->>?) gin_trgm_ops)'],
  date: [
    'btree (project_id, iso_timestamp_utc((properties->>?))) where iso_timestamp_utc((properties->>?)) is not null',
    'btree (project_id) where iso_timestamp_odd((properties->>?)) is true',
  ],
};
// Partial indexes give the planner no statistics on their expressions: without these it guesses a third
// of the project for any date filter and walks all of it. ANALYZE fills them in.
const STATISTICS: Record<PropertyIndexKind, string[]> = {
  number: [],
  text: [],
  date: ['iso_timestamp_utc((properties->>?))', 'iso_timestamp_odd((properties->>?))'],
};

export interface PropertyIndex {
  name: string;
  kind: PropertyIndexKind;
  key: string;
  valid: boolean;
  bytes: number;
}

const keyHash = (key: string) => createHash('sha256').update(key).digest('hex').slice(0, 16);
const indexName = (kind: PropertyIndexKind, part: number, key: string) =>
  `person_property_${kind}${part ? `_${part + 1}` : ''}_${keyHash(key)}`;
const statisticsName = (kind: PropertyIndexKind, part: number, key: string) =>
  `person_property_${kind}_statistics_${part + 1}_${keyHash(key)}`;
/** Binds `key` to every placeholder of an index or statistics definition. */
const keyParams = (definition: string, key: string) => Array(definition.split('?').length - 1).fill(key);

/**
 * Builds the indexes of `kinds` on property `key` without blocking writes (CREATE INDEX CONCURRENTLY, so
 * outside any transaction). An index a failed build left invalid is dropped and built again.
 */
export async function indexPersonProperty(
  em: EntityManager,
  key: string,
  kinds: readonly PropertyIndexKind[],
): Promise<PropertyIndex[]> {
  for (const kind of kinds) {
    for (const [part, method] of METHODS[kind].entries()) {
      const name = indexName(kind, part, key);
      const [existing] = await rows<{ valid: boolean }>(
        em,
        `select i.indisvalid as valid from pg_index i join pg_class c on c.oid = i.indexrelid
          where c.relname = ? and c.relnamespace = current_schema()::regnamespace`,
        [name],
      );
      if (!existing?.valid) {
        if (existing) await run(em, `drop index concurrently if exists ${name}`);
        await run(em, `create index concurrently ${name} on person using ${method}`, keyParams(method, key));
      }
      // The key is kept beside the index, so a listing can say which property it serves.
      await run(em, `comment on index ${name} is ?`, [JSON.stringify({ kind, key })]);
    }
    for (const [part, expression] of STATISTICS[kind].entries())
      await run(
        em,
        `create statistics if not exists ${statisticsName(kind, part, key)} on (${expression}) from person`,
        keyParams(expression, key),
      );
    if (STATISTICS[kind].length) await run(em, 'analyze person');
  }
  return (await personPropertyIndexes(em)).filter((index) => index.key === key);
}

/** Drops every index on property `key` (concurrently) and its statistics; returns the names of the indexes dropped. */
export async function dropPersonPropertyIndexes(em: EntityManager, key: string): Promise<string[]> {
  const names = (await personPropertyIndexes(em)).filter((index) => index.key === key).map((index) => index.name);
  for (const name of names) await run(em, `drop index concurrently if exists ${name}`);
  for (const kind of PROPERTY_INDEX_KINDS)
    for (const part of STATISTICS[kind].keys())
      await run(em, `drop statistics if exists ${statisticsName(kind, part, key)}`);
  return names;
}

/** The property indexes that exist, with the key and kind each serves, whether it is usable, and its size. */
export async function personPropertyIndexes(em: EntityManager): Promise<PropertyIndex[]> {
  const found = await rows<{ name: string; comment: string | null; valid: boolean; bytes: string }>(
    em,
    `select c.relname as name, obj_description(c.oid, 'pg_class') as comment, i.indisvalid as valid,
            pg_relation_size(c.oid) as bytes
       from pg_index i join pg_class c on c.oid = i.indexrelid
      where i.indrelid = 'person'::regclass and c.relname like 'person\\_property\\_%'
      order by c.relname`,
  );
  return found.flatMap((index) => {
    const described = describedBy(index.comment);
    return described ? [{ name: index.name, ...described, valid: index.valid, bytes: Number(index.bytes) }] : [];
  });
}

/**
 * The keys whose date index the filters may read through: every index of the kind is built and valid,
 * and the session reads a date without a zone as UTC, as the index does (otherwise try_timestamptz and
 * the index would disagree on such dates, so the filters keep to try_timestamptz).
 */
export async function dateIndexedKeys(em: EntityManager): Promise<Set<string>> {
  const [session] = await rows<{ zone: string }>(em, `select current_setting('TimeZone') as zone`);
  if (!UTC_ZONES.has(session.zone)) return new Set();
  const built = new Map<string, number>();
  for (const index of await personPropertyIndexes(em))
    if (index.kind === 'date' && index.valid) built.set(index.key, (built.get(index.key) ?? 0) + 1);
  return new Set([...built].filter(([, count]) => count === METHODS.date.length).map(([key]) => key));
}
const UTC_ZONES = new Set(['UTC', 'Etc/UTC', 'GMT', 'Etc/GMT', 'UCT', 'Etc/UCT', 'Universal', 'Etc/Universal', 'Zulu']);

/** The kind and key an index's comment names; null for an index this module did not comment (not ours). */
function describedBy(comment: string | null): { kind: PropertyIndexKind; key: string } | null {
  try {
    const described = JSON.parse(comment ?? 'null');
    return PROPERTY_INDEX_KINDS.includes(described?.kind) && typeof described.key === 'string'
      ? { kind: described.kind, key: described.key }
      : null;
  } catch {
    return null;
  }
}

export interface IndexBuildProgress {
  /** The index being built (empty before PostgreSQL has created its entry). */
  index: string;
  /** PostgreSQL's phase, e.g. "building index: scanning table" or "waiting for writers before build". */
  phase: string;
  done: number;
  total: number;
}

/**
 * The index builds under way on the person table now, from PostgreSQL's pg_stat_progress_create_index
 * (read from another connection while a build runs). `done`/`total` count what the phase counts: table
 * blocks while scanning, tuples while sorting and loading, transactions while waiting for them.
 */
export function personIndexBuilds(em: EntityManager): Promise<IndexBuildProgress[]> {
  return rows<IndexBuildProgress>(
    em,
    `select coalesce(i.relname, '') as index, p.phase,
            (case when p.blocks_total > 0 then p.blocks_done when p.tuples_total > 0 then p.tuples_done else p.lockers_done end)::float8 as done,
            (case when p.blocks_total > 0 then p.blocks_total when p.tuples_total > 0 then p.tuples_total else p.lockers_total end)::float8 as total
       from pg_stat_progress_create_index p left join pg_class i on i.oid = p.index_relid
      where p.relid = 'person'::regclass`,
  );
}
