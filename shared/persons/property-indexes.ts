// Indexes on one person property, for filters no general index serves: numeric comparisons (gt, gte, lt,
// lte, between) through a btree on the property read as a number, and substring and pattern matches
// (icontains, regex) through a trigram index on its text. PostHog's answer to the same problem is a
// materialized column chosen per hot property; here an operator picks the keys (`npm run manage --
// property index`). Each index costs every person write that touches the table, so none is made by default.
import type { EntityManager } from '@mikro-orm/postgresql';
import { createHash } from 'node:crypto';
import { rows, run } from '../db/sql.ts';

export const PROPERTY_INDEX_KINDS = ['number', 'text'] as const;
export type PropertyIndexKind = (typeof PROPERTY_INDEX_KINDS)[number];

// The expressions are the ones property-filters.ts writes (`try_numeric((p.properties->>'k'))`,
// `(p.properties->>'k') ilike …`), so the planner can match them; project_id leads, as every list filters by it.
const METHODS: Record<PropertyIndexKind, string> = {
  number: 'btree (project_id, try_numeric((properties->>?)))',
  text: 'gin (project_id, (properties->>?) gin_trgm_ops)',
};

export interface PropertyIndex {
  name: string;
  kind: PropertyIndexKind;
  key: string;
  valid: boolean;
  bytes: number;
}

const indexName = (kind: PropertyIndexKind, key: string) =>
  `person_property_${kind}_${createHash('sha256').update(key).digest('hex').slice(0, 16)}`;

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
    const name = indexName(kind, key);
    const [existing] = await rows<{ valid: boolean }>(
      em,
      `select i.indisvalid as valid from pg_index i join pg_class c on c.oid = i.indexrelid
        where c.relname = ? and c.relnamespace = current_schema()::regnamespace`,
      [name],
    );
    if (!existing?.valid) {
      if (existing) await run(em, `drop index concurrently if exists ${name}`);
      await run(em, `create index concurrently ${name} on person using ${METHODS[kind]}`, [key]);
    }
    // The key is kept beside the index, so a listing can say which property it serves.
    await run(em, `comment on index ${name} is ?`, [JSON.stringify({ kind, key })]);
  }
  return (await personPropertyIndexes(em)).filter((index) => index.key === key);
}

/** Drops every index on property `key` (concurrently); returns the names dropped. */
export async function dropPersonPropertyIndexes(em: EntityManager, key: string): Promise<string[]> {
  const names = (await personPropertyIndexes(em)).filter((index) => index.key === key).map((index) => index.name);
  for (const name of names) await run(em, `drop index concurrently if exists ${name}`);
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
