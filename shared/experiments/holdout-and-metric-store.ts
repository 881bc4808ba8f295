// Experiment holdouts and saved metrics: two project-scoped tables with the same life cycle
// (creator, created/updated times), so one set of statements serves both.
import type { EntityManager } from '@mikro-orm/postgresql';
import { userColumns } from '../accounts.ts';
import { type Page, pagedQuery } from '../db/paged.ts';
import { pgArray, rows, run } from '../db/sql.ts';

export type SideTable = 'experiment_holdout' | 'experiment_saved_metric';

const ORDER: Record<SideTable, string> = {
  experiment_holdout: 'r.created_at desc, r.id desc',
  experiment_saved_metric: 'lower(r.name), r.id',
};
const COLUMNS = `r.*, ${userColumns('u', 'creator')}`;
const from = (table: SideTable) => `${table} r left join app_user u on u.id = r.created_by_id`;
const JSONB = new Set(['filters', 'query']);
const placeholder = (column: string) => (JSONB.has(column) ? '?::jsonb' : column === 'tags' ? '?::text[]' : '?');
// jsonb columns go as JSON text, tags as a PostgreSQL array literal.
const encoded = (fields: Record<string, unknown>) =>
  Object.entries(fields).map(([column, value]) =>
    JSONB.has(column) ? JSON.stringify(value) : column === 'tags' ? pgArray(value as string[]) : value,
  );

export async function findSideRow(em: EntityManager, table: SideTable, projectId: number, id: number | string) {
  const [row] = await rows<Record<string, any>>(
    em,
    `select ${COLUMNS} from ${from(table)} where r.project_id = ? and r.id = ?`,
    [projectId, id],
  );
  return row ?? null;
}

export function listSideRows(em: EntityManager, table: SideTable, projectId: number, page: Page) {
  const matches = { sql: `${from(table)} where r.project_id = ?`, params: [projectId] };
  return pagedQuery<Record<string, any>>(
    em,
    { select: COLUMNS, from: matches, order: `order by ${ORDER[table]}` },
    page,
  );
}

/** Inserts a row from column values; returns its id. */
export async function insertSideRow(
  tx: EntityManager,
  table: SideTable,
  projectId: number,
  userId: number,
  fields: Record<string, unknown>,
): Promise<number> {
  const columns = Object.keys(fields);
  const [row] = await rows<{ id: number }>(
    tx,
    `insert into ${table} (project_id, created_by_id, ${columns.join(', ')})
     values (?, ?, ${columns.map(placeholder).join(', ')}) returning id`,
    [projectId, userId, ...encoded(fields)],
  );
  return row.id;
}

export async function updateSideRow(tx: EntityManager, table: SideTable, id: number, fields: Record<string, unknown>) {
  const columns = Object.keys(fields);
  if (columns.length === 0) return;
  await run(
    tx,
    `update ${table} set ${columns.map((c) => `${c} = ${placeholder(c)}`).join(', ')}, updated_at = now() where id = ?`,
    [...encoded(fields), id],
  );
}

export async function deleteSideRow(tx: EntityManager, table: SideTable, id: number) {
  await run(tx, `delete from ${table} where id = ?`, [id]);
}

/** A holdout's stored filters, or null when the project has no such holdout. */
export async function holdoutFilters(tx: EntityManager, projectId: number, id: number): Promise<unknown[] | null> {
  const [holdout] = await rows<{ filters: unknown[] }>(
    tx,
    `select filters from experiment_holdout where id = ? and project_id = ?`,
    [id, projectId],
  );
  return holdout?.filters ?? null;
}

/**
 * Stores a holdout's groups (null: the holdout is going away) and puts them on the flags of its
 * experiments, where the flag evaluator reads them.
 */
export async function setHoldoutGroups(
  tx: EntityManager,
  holdoutId: number,
  groups: unknown[] | null,
  holdout: { id: number; exclusion_percentage: number } | null,
) {
  if (groups)
    await run(tx, `update experiment_holdout set filters = ?::jsonb where id = ?`, [JSON.stringify(groups), holdoutId]);
  await run(
    tx,
    `update feature_flag f
        set filters = f.filters || jsonb_build_object('holdout_groups', ?::jsonb, 'holdout', ?::jsonb),
            version = version + 1
      where f.id in (select feature_flag_id from experiment where holdout_id = ?)`,
    [JSON.stringify(groups), JSON.stringify(holdout), holdoutId],
  );
}
