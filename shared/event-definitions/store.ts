// Event definitions: every statement on event_definition and its read counter, except the upsert
// that ingestion makes (shared/events/store.ts writes definitions together with the events).
import type { EntityManager } from '@mikro-orm/postgresql';
import { userColumns } from '../accounts.ts';
import { type Page, pagedQuery } from '../db/paged.ts';
import { containsPattern, pgArray, rows, run } from '../db/sql.ts';
import { forgetEventDefinition } from '../events/store.ts';

const COLUMNS = `d.*, ${userColumns('o', 'owner')}, ${userColumns('ub', 'updated_by')},
    ${userColumns('vb', 'verified_by')}`;
const FROM = `event_definition d
  left join app_user o on o.id = d.owner_id
  left join app_user ub on ub.id = d.updated_by_id
  left join app_user vb on vb.id = d.verified_by_id`;

export type DefinitionRow = Record<string, any>;

export interface DefinitionFilter {
  /** Every term must appear in the name. */
  terms: string[];
  eventType?: string;
  excluded?: string[];
  excludeHidden?: boolean;
}

// ?ordering: name, last_seen_at, last_seen_at::date, each optionally descending; others are ignored.
const ORDER_COLUMNS: Record<string, string> = {
  name: 'd.name collate "C"',
  last_seen_at: 'd.last_seen_at',
  'last_seen_at::date': `((d.last_seen_at at time zone 'UTC')::date)`,
};

function orderBy(ordering: string[] | undefined): string {
  const terms = (ordering?.length ? ordering : ['-last_seen_at::date', 'name'])
    .map((o) => {
      const desc = o.startsWith('-');
      const column = ORDER_COLUMNS[desc ? o.slice(1) : o];
      return column ? `${column} ${desc ? 'desc nulls last' : 'asc nulls first'}` : null;
    })
    .filter(Boolean);
  return [...(terms.length ? terms : ['d.name collate "C" asc']), 'd.id'].join(', ');
}

export async function findDefinition(em: EntityManager, projectId: number, id: string): Promise<DefinitionRow | null> {
  const [row] = await rows(em, `select ${COLUMNS} from ${FROM} where d.project_id = ? and d.id = ?::uuid`, [
    projectId,
    id,
  ]);
  return row ?? null;
}

export function listDefinitions(
  em: EntityManager,
  projectId: number,
  filter: DefinitionFilter,
  ordering: string[] | undefined,
  page: Page,
) {
  const where = ['d.project_id = ?'];
  const params: unknown[] = [projectId];
  for (const term of filter.terms) {
    where.push(`d.name ilike ?`);
    params.push(containsPattern(term));
  }
  if (filter.eventType === 'event_custom') where.push(`d.name not like '$%'`);
  if (filter.eventType === 'event_posthog') where.push(`d.name like '$%'`);
  if (filter.excluded) {
    where.push(`d.name not in (select jsonb_array_elements_text(?::jsonb))`);
    params.push(JSON.stringify(filter.excluded));
  }
  if (filter.excludeHidden) where.push('not d.hidden');
  const from = { sql: `${FROM} where ${where.join(' and ')}`, params };
  return pagedQuery<DefinitionRow>(em, { select: COLUMNS, from, order: `order by ${orderBy(ordering)}` }, page);
}

/** Every read through the API counts towards `query_usage_30_day`: one statement per request. */
export async function countReads(em: EntityManager, ids: string[]) {
  if (ids.length === 0) return;
  await run(
    em,
    `insert into event_definition_usage (definition_id, day, reads)
     select id::uuid, current_date, 1 from jsonb_array_elements_text(?::jsonb) as t(id)
     on conflict (definition_id, day) do update set reads = event_definition_usage.reads + 1`,
    [JSON.stringify(ids)],
  );
}

export async function readsInLast30Days(em: EntityManager, id: string): Promise<number> {
  const [usage] = await rows<{ n: number }>(
    em,
    `select coalesce(sum(reads), 0)::int as n from event_definition_usage
      where definition_id = ? and day > current_date - 30`,
    [id],
  );
  return usage.n;
}

export interface DefinitionChange {
  description: string;
  tags: string[];
  owner_id: number | null;
  default_columns: string[];
  post_to_slack: boolean;
  hidden: boolean;
  verified: boolean;
  verified_at: Date | null;
  verified_by_id: number | null;
}

export async function updateDefinition(em: EntityManager, id: string, next: DefinitionChange, userId: number) {
  await run(
    em,
    `update event_definition set description = ?, tags = ?::text[], owner_id = ?, default_columns = ?::text[],
            post_to_slack = ?, hidden = ?, verified = ?, verified_at = ?, verified_by_id = ?,
            updated_at = now(), updated_by_id = ?
      where id = ?`,
    [
      next.description,
      pgArray(next.tags),
      next.owner_id,
      pgArray(next.default_columns),
      next.post_to_slack,
      next.hidden,
      next.verified,
      next.verified_at,
      next.verified_by_id,
      userId,
      id,
    ],
  );
}

export async function deleteDefinition(em: EntityManager, id: string) {
  const deleted = await rows<{ project_id: number; name: string }>(
    em,
    `delete from event_definition where id = ? returning project_id, name`,
    [id],
  );
  for (const d of deleted) forgetEventDefinition(d.project_id, d.name);
}
