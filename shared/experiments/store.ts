// Experiments: every statement on experiment, its saved-metric links and its metric results, and
// the flag and cohort rows an experiment creates or changes. The rules live in ./service.ts.
import type { EntityManager } from '@mikro-orm/postgresql';
import { type Insertable, type InsertObject, sql, type UpdateObject } from 'kysely';
import { jsonArrayFrom, jsonBuildObject, jsonObjectFrom } from 'kysely/helpers/postgres';
import { Cohort, Experiment, ExperimentToSavedMetric } from '../platform/entities/index.ts';
import { type DB, db } from '../platform/db/kysely.ts';
import { type Page, pagedSelect } from '../platform/db/paged.ts';
import { containsPattern } from '../platform/db/sql.ts';
import { userBasicOf } from '../platform/db/user-basic.ts';
import type { FlagFilters } from '../flags/index.ts';

/**
 * A value for a jsonb column, sent as JSON text: an array stays a JSON array, and null is JSON null
 * (a jsonb value, never SQL NULL).
 */
export const jsonb = <T>(value: T) => sql<NonNullable<T>>`${JSON.stringify(value)}::jsonb`;

// One query per page: flag, holdout, creators and saved-metric links joined in.
function selectExperiments(em: EntityManager) {
  return db(em)
    .selectFrom('experiment as x')
    .innerJoin('feature_flag as f', 'f.id', 'x.feature_flag_id')
    .selectAll('x')
    .select((eb) => [
      userBasicOf(eb.ref('x.created_by_id')).as('created_by'),
      jsonBuildObject({
        id: eb.ref('f.id'),
        team_id: eb.ref('f.project_id'),
        name: eb.ref('f.name'),
        key: eb.ref('f.key'),
        filters: eb.ref('f.filters').$castTo<FlagFilters & Record<string, unknown>>(),
        deleted: eb.ref('f.deleted'),
        active: eb.ref('f.active'),
        ensure_experience_continuity: eb.ref('f.ensure_experience_continuity'),
        has_encrypted_payloads: eb.ref('f.has_encrypted_payloads'),
        version: eb.ref('f.version'),
        evaluation_runtime: eb.ref('f.evaluation_runtime'),
        evaluation_tags: eb.ref('f.evaluation_tags'),
      }).as('feature_flag'),
      jsonObjectFrom(
        eb
          .selectFrom('experiment_holdout as h')
          .select((h) => [
            'h.id',
            'h.name',
            'h.description',
            'h.filters',
            'h.created_at',
            'h.updated_at',
            userBasicOf(h.ref('h.created_by_id')).as('created_by'),
          ])
          .whereRef('h.id', '=', 'x.holdout_id'),
      ).as('holdout'),
      jsonArrayFrom(
        eb
          .selectFrom('experiment_to_saved_metric as l')
          .innerJoin('experiment_saved_metric as m', 'm.id', 'l.saved_metric_id')
          .select([
            'l.id',
            'l.experiment_id as experiment',
            'l.saved_metric_id as saved_metric',
            'l.metadata',
            'l.created_at',
            'm.query',
            'm.name',
          ])
          .whereRef('l.experiment_id', '=', 'x.id')
          .orderBy('l.id'),
      ).as('saved_metrics'),
    ]);
}

/** An experiment as the API shows it: its columns, its flag, holdout, creator and saved-metric links. */
export type ExperimentRow = Awaited<ReturnType<ReturnType<typeof selectExperiments>['executeTakeFirstOrThrow']>>;

/** The experiment, or null; a soft-deleted one only with `includeDeleted` (the answer to a delete). */
export async function findExperiment(
  em: EntityManager,
  projectId: number,
  id: number | string,
  includeDeleted = false,
): Promise<ExperimentRow | null> {
  let query = selectExperiments(em).where('x.project_id', '=', projectId).where('x.id', '=', Number(id));
  if (!includeDeleted) query = query.where((eb) => eb.not(eb.ref('x.deleted')));
  return (await query.executeTakeFirst()) ?? null;
}

export interface ExperimentFilter {
  archived: boolean;
  status?: 'draft' | 'running' | 'complete';
  search?: string;
  createdById?: number;
}

type ExperimentQuery = ReturnType<typeof selectExperiments>;
type Direction = 'asc' | 'desc';
const ORDERS: Record<string, (q: ExperimentQuery, direction: Direction) => ExperimentQuery> = {
  created_at: (q, d) => q.orderBy('x.created_at', (o) => o[d]().nullsLast()),
  created_by: (q, d) => q.orderBy('x.created_by_id', (o) => o[d]().nullsLast()),
  updated_at: (q, d) => q.orderBy('x.updated_at', (o) => o[d]().nullsLast()),
  name: (q, d) => q.orderBy('x.name', (o) => o[d]().nullsLast()),
  start_date: (q, d) => q.orderBy('x.start_date', (o) => o[d]().nullsLast()),
  end_date: (q, d) => q.orderBy('x.end_date', (o) => o[d]().nullsLast()),
  duration: (q, d) =>
    q.orderBy(
      (eb) => eb(eb.fn.coalesce('x.end_date', eb.fn<Date>('now')), '-', eb.ref('x.start_date')),
      (o) => o[d]().nullsLast(),
    ),
  status: (q, d) =>
    q.orderBy(
      (eb) => eb.case().when('x.start_date', 'is', null).then(0).when('x.end_date', 'is', null).then(1).else(2).end(),
      (o) => o[d]().nullsLast(),
    ),
};

/** Whether `order` (a field, `-` for descending) is one the list can sort by. */
export const isExperimentOrder = (order: string) => (order.startsWith('-') ? order.slice(1) : order) in ORDERS;

export function listExperiments(
  em: EntityManager,
  projectId: number,
  filter: ExperimentFilter,
  order: string | undefined,
  page: Page,
) {
  let query = selectExperiments(em)
    .where('x.project_id', '=', projectId)
    .where((eb) => eb.not(eb.ref('x.deleted')))
    .where((eb) => (filter.archived ? eb.ref('x.archived') : eb.not(eb.ref('x.archived'))));
  if (filter.status === 'draft') query = query.where('x.start_date', 'is', null);
  if (filter.status === 'running') query = query.where('x.start_date', 'is not', null).where('x.end_date', 'is', null);
  if (filter.status === 'complete') query = query.where('x.end_date', 'is not', null);
  if (filter.search) query = query.where('x.name', 'ilike', containsPattern(filter.search));
  if (filter.createdById !== undefined) query = query.where('x.created_by_id', '=', filter.createdById);
  if (order) {
    const desc = order.startsWith('-');
    query = ORDERS[desc ? order.slice(1) : order](query, desc ? 'desc' : 'asc');
  } else query = query.orderBy('x.created_at', 'desc');
  return pagedSelect(em, query.orderBy('x.id', 'desc'), page);
}

/** Names of live experiments starting with `prefix` (to number a copy). */
export async function experimentNamesStartingWith(em: EntityManager, projectId: number, prefix: string) {
  const found = await db(em)
    .selectFrom('experiment')
    .select('name')
    .where('project_id', '=', projectId)
    .where((eb) => eb.not(eb.ref('deleted')))
    .where('name', 'like', `${prefix.replace(/[\\%_]/g, (c) => `\\${c}`)}%`)
    .execute();
  return new Set(found.map((r) => r.name));
}

/** Creates the exposure cohort and links it to the experiment; returns the cohort row. */
export async function createExposureCohort(
  tx: EntityManager,
  projectId: number,
  experimentId: number,
  name: string,
  filters: Record<string, unknown>,
  userId: number,
) {
  const id = await tx.insert(Cohort, {
    projectId,
    name,
    filters,
    isStatic: false,
    isCalculating: true,
    createdById: userId,
  });
  await tx.nativeUpdate(Experiment, { id: experimentId }, { exposureCohortId: id });
  return db(tx).selectFrom('cohort').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
}

/** The stored daily results of one metric. */
export function metricResults(em: EntityManager, experimentId: number, metricUuid: string, fingerprint: string) {
  return db(em)
    .selectFrom('experiment_metric_result')
    .select((eb) => [
      eb.cast<string>('day', 'text').as('day'),
      'status',
      'result',
      'error_message',
      'computed_at',
      'created_at',
      'updated_at',
    ])
    .where('experiment_id', '=', experimentId)
    .where('metric_uuid', '=', metricUuid)
    .where('fingerprint', '=', fingerprint)
    .orderBy('day')
    .execute();
}

/** The days (YYYY-MM-DD in `timezone`) from `start` to `end` (or today). No table: PostgreSQL's calendar. */
export async function daysBetween(
  em: EntityManager,
  start: Date | string,
  end: Date | string | null,
  timezone: string,
) {
  const { days } = await db(em)
    .selectNoFrom(
      sql<
        string[]
      >`array(select d::date::text from generate_series((${start}::timestamptz at time zone ${timezone})::date,
       (coalesce(${end}::timestamptz, now()) at time zone ${timezone})::date, interval '1 day') d)`.as('days'),
    )
    .executeTakeFirstOrThrow();
  return days;
}

// ---- writes made by the experiment rules (in the caller's transaction) ----

export async function replaceSavedMetricLinks(
  tx: EntityManager,
  experimentId: number,
  links: { id: number; metadata: Record<string, unknown> | undefined }[],
) {
  await tx.nativeDelete(ExperimentToSavedMetric, { experimentId });
  for (const link of links)
    await tx.insert(ExperimentToSavedMetric, {
      experimentId,
      savedMetricId: link.id,
      metadata: link.metadata ?? {},
    });
}

/** The live flag with this key, if any. */
export async function liveFlag(tx: EntityManager, projectId: number, key: string) {
  return (
    (await db(tx)
      .selectFrom('feature_flag')
      .select((eb) => ['id', eb.ref('filters').$castTo<FlagFilters & Record<string, unknown>>().as('filters')])
      .where('project_id', '=', projectId)
      .where('key', '=', key)
      .where((eb) => eb.not(eb.ref('deleted')))
      .executeTakeFirst()) ?? null
  );
}

export type FlagRef = NonNullable<Awaited<ReturnType<typeof liveFlag>>>;

/**
 * Creates the experiment's flag, or nothing when a live flag with this key appeared meanwhile
 * (a concurrent request): then that flag is the one, not a unique-violation 500.
 */
export async function insertFlagUnlessTaken(
  tx: EntityManager,
  flag: {
    projectId: number;
    key: string;
    name: string;
    filters: Record<string, unknown>;
    active: boolean;
    continuity: boolean;
  },
  userId: number,
): Promise<FlagRef | null> {
  const created = await db(tx)
    .insertInto('feature_flag')
    .values({
      project_id: flag.projectId,
      key: flag.key,
      name: flag.name,
      filters: jsonb(flag.filters),
      active: flag.active,
      ensure_experience_continuity: flag.continuity,
      created_by_id: userId,
    })
    .onConflict((oc) =>
      oc
        .columns(['project_id', 'key'])
        .where((eb) => eb.not(eb.ref('deleted')))
        .doNothing(),
    )
    .returning((eb) => ['id', eb.ref('filters').$castTo<FlagFilters & Record<string, unknown>>().as('filters')])
    .executeTakeFirst();
  return created ?? null;
}

export async function updateFlagFilters(
  tx: EntityManager,
  flagId: number,
  filters: FlagFilters | Record<string, unknown>,
  activate: boolean,
) {
  await db(tx)
    .updateTable('feature_flag')
    .set((eb) => ({
      filters: jsonb(filters as Record<string, unknown>),
      active: eb.or([eb.ref('active'), eb.val(activate)]).$castTo<boolean>(),
      version: eb('version', '+', 1),
      updated_at: eb.fn<Date>('now'),
    }))
    .where('id', '=', flagId)
    .execute();
}

type JsonColumn =
  | 'filters'
  | 'parameters'
  | 'secondary_metrics'
  | 'exposure_criteria'
  | 'metrics'
  | 'metrics_secondary'
  | 'stats_config'
  | 'primary_metrics_ordered_uuids'
  | 'secondary_metrics_ordered_uuids'
  | 'guardrail_status';
type NewExperiment = Omit<Insertable<DB['experiment']>, 'id'>;
/**
 * An experiment's columns as the rules write them: plain values, a jsonb column's value possibly JSON
 * null (encode() sends them as JSON).
 */
export type ExperimentColumns = Omit<NewExperiment, JsonColumn> & { [K in JsonColumn]?: NewExperiment[K] | null };

// jsonb columns go as JSON text, so a JSON null stays a jsonb null (NOT NULL columns accept it) and an
// array stays a JSON array (pg would send a JavaScript array as a PostgreSQL array).
const encode = (c: Partial<ExperimentColumns>): UpdateObject<DB, 'experiment'> => ({
  ...c,
  filters: json(c.filters),
  parameters: json(c.parameters),
  secondary_metrics: json(c.secondary_metrics),
  exposure_criteria: json(c.exposure_criteria),
  metrics: json(c.metrics),
  metrics_secondary: json(c.metrics_secondary),
  stats_config: json(c.stats_config),
  primary_metrics_ordered_uuids: json(c.primary_metrics_ordered_uuids),
  secondary_metrics_ordered_uuids: json(c.secondary_metrics_ordered_uuids),
  guardrail_status: json(c.guardrail_status),
});
const json = <T>(value: T | undefined) => (value === undefined ? undefined : jsonb(value));

/** Inserts an experiment; returns its id. */
export async function insertExperiment(tx: EntityManager, columns: ExperimentColumns): Promise<number> {
  const row = await db(tx)
    .insertInto('experiment')
    // encode() maps every column it is given; an insert is given the required ones (ExperimentColumns).
    .values(encode(columns) as InsertObject<DB, 'experiment'>)
    .returning('id')
    .executeTakeFirstOrThrow();
  return row.id;
}

/** Sets the given columns and updated_at. */
export async function updateExperimentColumns(tx: EntityManager, id: number, columns: Partial<ExperimentColumns>) {
  await db(tx)
    .updateTable('experiment')
    .set((eb) => ({ ...encode(columns), updated_at: eb.fn<Date>('now') }))
    .where('id', '=', id)
    .execute();
}
