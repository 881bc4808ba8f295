// Event definitions: every statement on event_definition and its read counter, except the upsert
// that ingestion makes (shared/events/store.ts writes definitions together with the events).
import type { EntityManager } from '@mikro-orm/postgresql';
import { type Selectable, sql } from 'kysely';
import { type DB, db } from '../platform/db/kysely.ts';
import { type Page, pagedSelect } from '../platform/db/paged.ts';
import { containsPattern } from '../platform/db/sql.ts';
import { userBasicOf } from '../platform/db/user-basic.ts';
import { forgetEventDefinition } from './seen.ts';

const selectDefinitions = (em: EntityManager) =>
  db(em)
    .selectFrom('event_definition as d')
    .selectAll('d')
    .select((eb) => [
      userBasicOf(eb.ref('d.owner_id')).as('owner'),
      userBasicOf(eb.ref('d.updated_by_id')).as('updated_by'),
      userBasicOf(eb.ref('d.verified_by_id')).as('verified_by'),
    ]);

type DefinitionQuery = ReturnType<typeof selectDefinitions>;

/** A definition with its owner, last editor and verifier. */
export type DefinitionRow = Awaited<ReturnType<DefinitionQuery['executeTakeFirstOrThrow']>>;

export interface DefinitionFilter {
  /** Every term must appear in the name. */
  terms: string[];
  eventType?: string;
  excluded?: string[];
  excludeHidden?: boolean;
}

type Direction = 'asc' | 'desc';
// ?ordering: name, last_seen_at, last_seen_at::date, each optionally descending; others are ignored.
// A descending column puts nulls last, an ascending one first; the expressions are the index's
// (event_definition_project_seen_idx).
const ORDER_COLUMNS: Record<string, (q: DefinitionQuery, d: Direction) => DefinitionQuery> = {
  name: (q, d) => q.orderBy('d.name', (o) => nulls(o.collate('C')[d](), d)),
  last_seen_at: (q, d) => q.orderBy('d.last_seen_at', (o) => nulls(o[d](), d)),
  // `at time zone`, which Kysely has no operator for.
  'last_seen_at::date': (q, d) => q.orderBy(sql`((d.last_seen_at at time zone 'UTC')::date)`, (o) => nulls(o[d](), d)),
};
const nulls = <O extends { nullsLast(): O; nullsFirst(): O }>(o: O, d: Direction) =>
  d === 'desc' ? o.nullsLast() : o.nullsFirst();

function ordered(query: DefinitionQuery, ordering: string[] | undefined): DefinitionQuery {
  let orderedBy = 0;
  for (const o of ordering?.length ? ordering : ['-last_seen_at::date', 'name']) {
    const desc = o.startsWith('-');
    const order = ORDER_COLUMNS[desc ? o.slice(1) : o];
    if (!order) continue;
    query = order(query, desc ? 'desc' : 'asc');
    orderedBy++;
  }
  if (orderedBy === 0) query = query.orderBy('d.name', (o) => o.collate('C').asc());
  return query.orderBy('d.id');
}

export async function findDefinition(em: EntityManager, projectId: number, id: string): Promise<DefinitionRow | null> {
  const row = await selectDefinitions(em)
    .where('d.project_id', '=', projectId)
    .where('d.id', '=', id)
    .executeTakeFirst();
  return row ?? null;
}

export function listDefinitions(
  em: EntityManager,
  projectId: number,
  filter: DefinitionFilter,
  ordering: string[] | undefined,
  page: Page,
) {
  let query = selectDefinitions(em).where('d.project_id', '=', projectId);
  for (const term of filter.terms) query = query.where('d.name', 'ilike', containsPattern(term));
  if (filter.eventType === 'event_custom') query = query.where('d.name', 'not like', '$%');
  if (filter.eventType === 'event_posthog') query = query.where('d.name', 'like', '$%');
  const excluded = filter.excluded;
  if (excluded) query = query.where((eb) => eb.not(eb('d.name', '=', eb.fn.any(eb.val(excluded)))));
  if (filter.excludeHidden) query = query.where((eb) => eb.not(eb.ref('d.hidden')));
  return pagedSelect(em, ordered(query, ordering), page);
}

/** Every read through the API counts towards `query_usage_30_day`: one statement per request. */
export async function countReads(em: EntityManager, ids: string[]) {
  if (ids.length === 0) return;
  await db(em)
    .insertInto('event_definition_usage')
    .values(ids.map((id) => ({ definition_id: id, day: sql<string>`current_date`, reads: 1 })))
    .onConflict((oc) =>
      oc.columns(['definition_id', 'day']).doUpdateSet((eb) => ({ reads: eb('event_definition_usage.reads', '+', 1) })),
    )
    .execute();
}

export async function readsInLast30Days(em: EntityManager, id: string): Promise<number> {
  const usage = await db(em)
    .selectFrom('event_definition_usage')
    .select((eb) => eb.cast<number>(eb.fn.coalesce(eb.fn.sum('reads'), eb.lit(0)), 'integer').as('n'))
    .where('definition_id', '=', id)
    .where('day', '>', sql<string>`current_date - 30`)
    .executeTakeFirstOrThrow();
  return usage.n;
}

/** What an update sets (besides who and when). */
export type DefinitionChange = Pick<
  Selectable<DB['event_definition']>,
  | 'description'
  | 'tags'
  | 'owner_id'
  | 'default_columns'
  | 'post_to_slack'
  | 'hidden'
  | 'verified'
  | 'verified_at'
  | 'verified_by_id'
>;

export async function updateDefinition(em: EntityManager, id: string, next: DefinitionChange, userId: number) {
  // Through Kysely rather than the entity: pg sends tags and default_columns as array literals with
  // every element quoted (MikroORM's own array literal leaves "NULL" and surrounding spaces unquoted).
  await db(em)
    .updateTable('event_definition')
    .set((eb) => ({ ...next, updated_at: eb.fn<Date>('now'), updated_by_id: userId }))
    .where('id', '=', id)
    .execute();
}

export async function deleteDefinition(em: EntityManager, id: string) {
  const deleted = await db(em)
    .deleteFrom('event_definition')
    .where('id', '=', id)
    .returning(['project_id', 'name'])
    .execute();
  for (const d of deleted) forgetEventDefinition(d.project_id, d.name);
}
