// Experiments: every statement on experiment, its saved-metric links and its metric results, and
// the flag and cohort rows an experiment creates or changes. The rules live in api/experiments/service.ts.
import type { EntityManager } from '@mikro-orm/postgresql';
import { userColumns } from '../accounts.ts';
import { type Page, pagedQuery } from '../db/paged.ts';
import { containsPattern, rows, run } from '../db/sql.ts';

export type ExperimentRow = Record<string, any>;

// One query per page: flag, holdout, creator and saved-metric links joined in.
const COLUMNS = `x.*, ${userColumns('u', 'creator')}, ${userColumns('hu', 'holdout_creator')},
    jsonb_build_object('id', f.id, 'team_id', f.project_id, 'name', f.name, 'key', f.key, 'filters', f.filters,
      'deleted', f.deleted, 'active', f.active, 'ensure_experience_continuity', f.ensure_experience_continuity,
      'has_encrypted_payloads', f.has_encrypted_payloads, 'version', f.version,
      'evaluation_runtime', f.evaluation_runtime, 'evaluation_tags', to_jsonb(f.evaluation_tags)) as feature_flag,
    case when h.id is null then null else jsonb_build_object('id', h.id, 'name', h.name,
      'description', h.description, 'filters', h.filters, 'created_at', h.created_at,
      'updated_at', h.updated_at) end as holdout,
    coalesce((select jsonb_agg(jsonb_build_object('id', l.id, 'experiment', l.experiment_id,
        'saved_metric', l.saved_metric_id, 'metadata', l.metadata, 'created_at', l.created_at, 'query', m.query,
        'name', m.name) order by l.id)
      from experiment_to_saved_metric l join experiment_saved_metric m on m.id = l.saved_metric_id
      where l.experiment_id = x.id), '[]'::jsonb) as saved_metrics`;
const FROM = `experiment x
  join feature_flag f on f.id = x.feature_flag_id
  left join experiment_holdout h on h.id = x.holdout_id
  left join app_user u on u.id = x.created_by_id
  left join app_user hu on hu.id = h.created_by_id`;

/** The experiment, or null; a soft-deleted one only with `includeDeleted` (the answer to a delete). */
export async function findExperiment(
  em: EntityManager,
  projectId: number,
  id: number | string,
  includeDeleted = false,
) {
  const live = includeDeleted ? '' : 'and not x.deleted';
  const sql = `select ${COLUMNS} from ${FROM} where x.project_id = ? and x.id = ? ${live}`;
  const [row] = await rows<ExperimentRow>(em, sql, [projectId, id]);
  return row ?? null;
}

export interface ExperimentFilter {
  archived: boolean;
  status?: 'draft' | 'running' | 'complete';
  search?: string;
  createdById?: number;
}

const ORDERS: Record<string, string> = {
  created_at: 'x.created_at',
  created_by: 'x.created_by_id',
  updated_at: 'x.updated_at',
  name: 'x.name',
  start_date: 'x.start_date',
  end_date: 'x.end_date',
  duration: `(coalesce(x.end_date, now()) - x.start_date)`,
  status: `(case when x.start_date is null then 0 when x.end_date is null then 1 else 2 end)`,
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
  const where = ['x.project_id = ?', 'not x.deleted', filter.archived ? 'x.archived' : 'not x.archived'];
  const params: unknown[] = [projectId];
  if (filter.status === 'draft') where.push('x.start_date is null');
  if (filter.status === 'running') where.push('x.start_date is not null and x.end_date is null');
  if (filter.status === 'complete') where.push('x.end_date is not null');
  if (filter.search) {
    where.push('x.name ilike ?');
    params.push(containsPattern(filter.search));
  }
  if (filter.createdById !== undefined) {
    where.push('x.created_by_id = ?');
    params.push(filter.createdById);
  }
  let orderBy = 'x.created_at desc';
  if (order) {
    const desc = order.startsWith('-');
    orderBy = `${ORDERS[desc ? order.slice(1) : order]} ${desc ? 'desc' : 'asc'} nulls last`;
  }
  const from = { sql: `${FROM} where ${where.join(' and ')}`, params };
  return pagedQuery<ExperimentRow>(em, { select: COLUMNS, from, order: `order by ${orderBy}, x.id desc` }, page);
}

/** Names of live experiments starting with `prefix` (to number a copy). */
export async function experimentNamesStartingWith(em: EntityManager, projectId: number, prefix: string) {
  const found = await rows<{ name: string }>(
    em,
    `select name from experiment where project_id = ? and not deleted and name like ?`,
    [projectId, `${prefix.replace(/[\\%_]/g, (c) => `\\${c}`)}%`],
  );
  return new Set(found.map((r) => r.name));
}

/** Creates the exposure cohort and links it to the experiment; returns the cohort row. */
export async function createExposureCohort(
  tx: EntityManager,
  projectId: number,
  experimentId: number,
  name: string,
  filters: unknown,
  userId: number,
) {
  const [cohort] = await rows<Record<string, any>>(
    tx,
    `insert into cohort (project_id, name, filters, is_static, is_calculating, created_by_id)
     values (?, ?, ?::jsonb, false, true, ?) returning *`,
    [projectId, name, JSON.stringify(filters), userId],
  );
  await run(tx, `update experiment set exposure_cohort_id = ? where id = ?`, [cohort.id, experimentId]);
  return cohort;
}

/** The stored daily results of one metric. */
export function metricResults(em: EntityManager, experimentId: number, metricUuid: string, fingerprint: string) {
  return rows<Record<string, any>>(
    em,
    `select day::text as day, status, result, error_message, computed_at, created_at, updated_at
       from experiment_metric_result
      where experiment_id = ? and metric_uuid = ? and fingerprint = ? order by day`,
    [experimentId, metricUuid, fingerprint],
  );
}

/** The days (YYYY-MM-DD in `timezone`) from `start` to `end` (or today). */
export async function daysBetween(
  em: EntityManager,
  start: Date | string,
  end: Date | string | null,
  timezone: string,
) {
  const [{ days }] = await rows<{ days: string[] }>(
    em,
    `select array(select d::date::text from generate_series((?::timestamptz at time zone ?)::date,
       (coalesce(?::timestamptz, now()) at time zone ?)::date, interval '1 day') d) as days`,
    [start, timezone, end, timezone],
  );
  return days;
}

// ---- writes made by the experiment rules (in the caller's transaction) ----

export async function replaceSavedMetricLinks(
  tx: EntityManager,
  experimentId: number,
  links: { id: number; metadata: unknown }[],
) {
  await run(tx, `delete from experiment_to_saved_metric where experiment_id = ?`, [experimentId]);
  for (const link of links)
    await run(
      tx,
      `insert into experiment_to_saved_metric (experiment_id, saved_metric_id, metadata) values (?, ?, ?::jsonb)`,
      [experimentId, link.id, JSON.stringify(link.metadata ?? {})],
    );
}

export interface FlagRef {
  id: number;
  filters: any;
}

/** The live flag with this key, if any. */
export async function liveFlag(tx: EntityManager, projectId: number, key: string): Promise<FlagRef | null> {
  const [flag] = await rows<FlagRef>(
    tx,
    `select id, filters from feature_flag where project_id = ? and key = ? and not deleted`,
    [projectId, key],
  );
  return flag ?? null;
}

/**
 * Creates the experiment's flag, or nothing when a live flag with this key appeared meanwhile
 * (a concurrent request): then that flag is the one, not a unique-violation 500.
 */
export async function insertFlagUnlessTaken(
  tx: EntityManager,
  flag: { projectId: number; key: string; name: string; filters: unknown; active: boolean; continuity: boolean },
  userId: number,
): Promise<FlagRef | null> {
  const [created] = await rows<FlagRef>(
    tx,
    `insert into feature_flag (project_id, key, name, filters, active, ensure_experience_continuity, created_by_id)
       values (?, ?, ?, ?::jsonb, ?, ?, ?)
       on conflict (project_id, key) where not deleted do nothing returning id, filters`,
    [flag.projectId, flag.key, flag.name, JSON.stringify(flag.filters), flag.active, flag.continuity, userId],
  );
  return created ?? null;
}

export async function updateFlagFilters(tx: EntityManager, flagId: number, filters: unknown, activate: boolean) {
  await run(
    tx,
    `update feature_flag set filters = ?::jsonb, active = active or ?, version = version + 1, updated_at = now()
      where id = ?`,
    [JSON.stringify(filters), activate, flagId],
  );
}

// Columns stored as jsonb: values are sent as JSON text (JSON null included, as 'null').
const JSONB = new Set([
  'filters',
  'parameters',
  'secondary_metrics',
  'exposure_criteria',
  'primary_metrics_ordered_uuids',
  'secondary_metrics_ordered_uuids',
  'stats_config',
  'metrics',
  'metrics_secondary',
]);
const placeholder = (column: string) => (JSONB.has(column) ? '?::jsonb' : '?');
const encoded = (columns: Record<string, unknown>) =>
  Object.entries(columns).map(([column, value]) => (JSONB.has(column) ? JSON.stringify(value) : value));

/** Inserts an experiment from column values; returns its id. */
export async function insertExperiment(tx: EntityManager, columns: Record<string, unknown>): Promise<number> {
  const names = Object.keys(columns);
  const [row] = await rows<{ id: number }>(
    tx,
    `insert into experiment (${names.join(', ')}) values (${names.map(placeholder).join(', ')}) returning id`,
    encoded(columns),
  );
  return row.id;
}

/** Sets the given columns and updated_at. */
export async function updateExperimentColumns(tx: EntityManager, id: number, columns: Record<string, unknown>) {
  const sets = Object.keys(columns).map((c) => `${c} = ${placeholder(c)}`);
  await run(tx, `update experiment set ${sets.join(', ')}, updated_at = now() where id = ?`, [...encoded(columns), id]);
}
