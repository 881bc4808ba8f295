// Experiment holdouts and saved metrics: two project-scoped tables with the same life cycle
// (creator, created/updated times), read with their creator and written through their entities.
import type { EntityManager } from '@mikro-orm/postgresql';
import { type Selectable, sql } from 'kysely';
import { ExperimentHoldout, ExperimentSavedMetric } from '../platform/entities/index.ts';
import { type DB, db } from '../platform/db/kysely.ts';
import { type Page, pagedSelect } from '../platform/db/paged.ts';
import { userBasicOf } from '../platform/db/user-basic.ts';
import { jsonb } from './store.ts';

const selectHoldouts = (em: EntityManager) =>
  db(em)
    .selectFrom('experiment_holdout as r')
    .selectAll('r')
    .select((eb) => userBasicOf(eb.ref('r.created_by_id')).as('created_by'));

const selectSavedMetrics = (em: EntityManager) =>
  db(em)
    .selectFrom('experiment_saved_metric as r')
    .selectAll('r')
    .select((eb) => userBasicOf(eb.ref('r.created_by_id')).as('created_by'));

export type HoldoutRow = Awaited<ReturnType<ReturnType<typeof selectHoldouts>['executeTakeFirstOrThrow']>>;
export type SavedMetricRow = Awaited<ReturnType<ReturnType<typeof selectSavedMetrics>['executeTakeFirstOrThrow']>>;

/** What a holdout's create or update sets besides the project, creator and times. */
export type HoldoutFields = Partial<Pick<Selectable<DB['experiment_holdout']>, 'name' | 'description' | 'filters'>>;
/** What a saved metric's create or update sets besides the project, creator and times. */
export type SavedMetricFields = Partial<
  Pick<Selectable<DB['experiment_saved_metric']>, 'name' | 'description' | 'query' | 'tags'>
>;

// ---- holdouts ----

export async function findHoldout(em: EntityManager, projectId: number, id: number) {
  const row = await selectHoldouts(em).where('r.project_id', '=', projectId).where('r.id', '=', id).executeTakeFirst();
  return row ?? null;
}

export function listHoldouts(em: EntityManager, projectId: number, page: Page) {
  const query = selectHoldouts(em)
    .where('r.project_id', '=', projectId)
    .orderBy('r.created_at', 'desc')
    .orderBy('r.id', 'desc');
  return pagedSelect(em, query, page);
}

/** Inserts a holdout; returns its id. */
export function insertHoldout(
  tx: EntityManager,
  projectId: number,
  userId: number,
  fields: HoldoutFields & { name: string },
): Promise<number> {
  return tx.insert(ExperimentHoldout, { ...fields, projectId, createdById: userId });
}

export async function updateHoldout(tx: EntityManager, id: number, fields: HoldoutFields) {
  if (Object.keys(fields).length === 0) return;
  await tx.nativeUpdate(ExperimentHoldout, { id }, { ...fields, updatedAt: new Date() });
}

export async function deleteHoldout(tx: EntityManager, id: number) {
  await tx.nativeDelete(ExperimentHoldout, { id });
}

/** A holdout's stored filters, or null when the project has no such holdout. */
export async function holdoutFilters(tx: EntityManager, projectId: number, id: number): Promise<unknown[] | null> {
  const holdout = await db(tx)
    .selectFrom('experiment_holdout')
    .select('filters')
    .where('id', '=', id)
    .where('project_id', '=', projectId)
    .executeTakeFirst();
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
  if (groups) await tx.nativeUpdate(ExperimentHoldout, { id: holdoutId }, { filters: groups });
  await db(tx)
    .updateTable('feature_flag')
    .set((eb) => ({
      // jsonb concatenation (||), which Kysely has no operator for.
      filters: sql<
        Record<string, unknown>
      >`${eb.ref('filters')} || jsonb_build_object('holdout_groups', ${JSON.stringify(groups)}::jsonb, 'holdout', ${JSON.stringify(holdout)}::jsonb)`,
      version: eb('version', '+', 1),
    }))
    .where('id', 'in', (eb) =>
      eb.selectFrom('experiment').select('feature_flag_id').where('holdout_id', '=', holdoutId),
    )
    .execute();
}

// ---- saved metrics ----

export async function findSavedMetric(em: EntityManager, projectId: number, id: number) {
  const row = await selectSavedMetrics(em)
    .where('r.project_id', '=', projectId)
    .where('r.id', '=', id)
    .executeTakeFirst();
  return row ?? null;
}

export function listSavedMetrics(em: EntityManager, projectId: number, page: Page) {
  const query = selectSavedMetrics(em)
    .where('r.project_id', '=', projectId)
    .orderBy((eb) => eb.fn('lower', ['r.name']))
    .orderBy('r.id');
  return pagedSelect(em, query, page);
}

// Saved metrics are written through Kysely rather than the entity: pg sends tags as an array literal
// with every element quoted (MikroORM's own literal leaves "NULL" and surrounding spaces unquoted).
const savedMetricColumns = (fields: SavedMetricFields) => ({
  name: fields.name,
  description: fields.description,
  query: fields.query === undefined ? undefined : jsonb(fields.query),
  tags: fields.tags,
});

/** Inserts a saved metric; returns its id. */
export async function insertSavedMetric(
  tx: EntityManager,
  projectId: number,
  userId: number,
  fields: SavedMetricFields & { name: string; query: Record<string, unknown> },
): Promise<number> {
  const row = await db(tx)
    .insertInto('experiment_saved_metric')
    .values({
      ...savedMetricColumns(fields),
      name: fields.name,
      query: jsonb(fields.query),
      project_id: projectId,
      created_by_id: userId,
    })
    .returning('id')
    .executeTakeFirstOrThrow();
  return row.id;
}

export async function updateSavedMetric(tx: EntityManager, id: number, fields: SavedMetricFields) {
  if (Object.keys(fields).length === 0) return;
  await db(tx)
    .updateTable('experiment_saved_metric')
    .set((eb) => ({ ...savedMetricColumns(fields), updated_at: eb.fn<Date>('now') }))
    .where('id', '=', id)
    .execute();
}

export async function deleteSavedMetric(tx: EntityManager, id: number) {
  await tx.nativeDelete(ExperimentSavedMetric, { id });
}
