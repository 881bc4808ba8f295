// Cohort membership as SQL over `person p`: static cohorts through cohort_person, dynamic cohorts by
// evaluating their filters — person properties, nested cohorts, and PostHog's behavioral
// "performed_event" filters (used by experiment exposure cohorts). Used by person lists (cohort
// filters) and the persons `cohorts` endpoint. Behavioral filters read events, so the event store
// answers them first (whichever engine holds the events), with the ids of the persons who match;
// the SQL then tests `p.id` against those ids.
import type { EntityManager } from '@mikro-orm/postgresql';
import type { EventStore, PerformedEventQuery } from '../events/index.ts';
import {
  FilterError,
  filterItems,
  propertyFiltersSql,
  storableText,
  type PropertyFilterItem,
  type SpecialFilter,
  type SqlFragment,
} from '../platform/db/property-filters.ts';
import { isStorableInstant } from '../platform/time.ts';
import { db } from '../platform/db/kysely.ts';
import { pgArray, rows } from '../platform/db/sql.ts';

/** The cohorts of these ids (an id past the integer column's range names none: no query for it). */
const cohortsIn = async (em: EntityManager, projectId: number, ids: number[]) => {
  const valid = ids.filter((id) => Number.isSafeInteger(id) && id >= -2147483648 && id <= 2147483647);
  return valid.length ? cohortsOf(em, projectId, valid) : [];
};
const cohortsOf = (em: EntityManager, projectId: number, ids: number[]) =>
  db(em)
    .selectFrom('cohort')
    .select(['id', 'is_static', 'filters'])
    .where('project_id', '=', projectId)
    .where('deleted', '=', false)
    .where('id', 'in', ids)
    .execute();
type CohortRow = Awaited<ReturnType<typeof cohortsOf>>[number];

const INTERVALS: Record<string, string> = { day: 'days', week: 'weeks', month: 'months', year: 'years', hour: 'hours' };
const MAX_NESTING = 5;

/** The ids of cohorts a filter tree refers to. */
function referencedCohorts(filters: unknown): Set<number> {
  const ids = filterItems(filters)
    .filter((item) => item.type === 'cohort' || item.type === 'precalculated-cohort' || item.type === 'static-cohort')
    .map((item) => Number(item.value));
  return new Set(ids.filter(Number.isInteger));
}

/**
 * The persons of each behavioral item, keyed by the item (the filter tree's own object), or the
 * FilterError of a malformed one (thrown when the item is used, as any other malformed filter is).
 */
export type BehavioralMembers = Map<object, string[] | FilterError>;

/** Asks the event store for the persons of every behavioral item in `trees` (only those `among`, if given). */
export async function behavioralMembers(
  events: EventStore | undefined,
  projectId: number,
  trees: unknown[],
  among?: readonly string[],
): Promise<BehavioralMembers> {
  const members: BehavioralMembers = new Map();
  const now = new Date();
  for (const tree of trees)
    for (const item of filterItems(tree)) {
      if (item.type !== 'behavioral' || members.has(item)) continue;
      if (events === undefined) throw new Error('a behavioral filter needs the event store');
      try {
        members.set(
          item,
          await events.performedEventPersonIds(
            projectId,
            behavioralQuery(item as PropertyFilterItem as BehavioralItem, now),
            among,
          ),
        );
      } catch (error) {
        if (!(error instanceof FilterError)) throw error;
        members.set(item, error);
      }
    }
  return members;
}

/** Loads every cohort `filters` refers to (transitively) and returns a resolver for cohort and behavioral items. */
export async function cohortFilterResolver(
  em: EntityManager,
  events: EventStore | undefined,
  projectId: number,
  filters: unknown,
): Promise<SpecialFilter> {
  const cohorts = new Map<number, CohortRow>();
  let pending = [...referencedCohorts(filters)];
  for (let depth = 0; pending.length && depth < MAX_NESTING; depth++) {
    const found = await cohortsIn(em, projectId, pending);
    for (const row of found) cohorts.set(row.id, row);
    pending = found.flatMap((r) => [...referencedCohorts(r.filters?.properties)]).filter((id) => !cohorts.has(id));
  }
  const behavioral = await behavioralMembers(events, projectId, [
    filters,
    ...[...cohorts.values()].map((c) => c.filters?.properties),
  ]);
  return buildResolver(cohorts, behavioral, 0);
}

function buildResolver(cohorts: Map<number, CohortRow>, behavioral: BehavioralMembers, depth: number): SpecialFilter {
  const resolve: SpecialFilter = (item) => {
    if (item.type === 'cohort' || item.type === 'precalculated-cohort' || item.type === 'static-cohort') {
      const cohort = cohorts.get(Number(item.value));
      if (!cohort) throw new FilterError(`Cohort ${asText(item.value)} does not exist in this project.`);
      const members = cohortMembersSql(cohort, cohorts, behavioral, depth + 1);
      return item.operator === 'not_in' ? { sql: `not (${members.sql})`, params: members.params } : members;
    }
    if (item.type === 'behavioral') {
      const members = behavioral.get(item);
      if (members === undefined) throw new Error('a behavioral filter the event store was not asked about');
      if (members instanceof FilterError) throw members;
      const sql = `p.id = any(?::bigint[])`;
      return { sql: (item as BehavioralItem).negation ? `not (${sql})` : sql, params: [pgArray(members)] };
    }
    return undefined;
  };
  return resolve;
}

const asText = (v: unknown) => (typeof v === 'string' ? v : JSON.stringify(v));

/** SQL true when person `p` is in `cohort` (its behavioral items' persons from behavioralMembers). */
export function cohortMembersSql(
  cohort: CohortRow,
  cohorts: Map<number, CohortRow>,
  behavioral: BehavioralMembers,
  depth = 0,
): SqlFragment {
  if (depth > MAX_NESTING) throw new FilterError('Cohorts are nested too deeply.');
  if (cohort.is_static)
    return {
      sql: `exists (select 1 from cohort_person cp where cp.cohort_id = ? and cp.person_id = p.id)`,
      params: [cohort.id],
    };
  const tree = cohort.filters?.properties;
  if (!tree) return { sql: 'false', params: [] };
  return propertyFiltersSql(tree, 'p.properties', buildResolver(cohorts, behavioral, depth));
}

interface BehavioralItem extends PropertyFilterItem {
  key: string;
  value: string;
  explicit_datetime?: string;
  time_value?: number;
  time_interval?: string;
  operator_value?: number;
  event_filters?: unknown;
  negation?: boolean;
}

/** "performed_event" (at least once) and "performed_event_multiple" (operator_value times) since a date. */
function behavioralQuery(item: BehavioralItem, now: Date): PerformedEventQuery {
  if (item.value !== 'performed_event' && item.value !== 'performed_event_multiple')
    throw new FilterError(`Unsupported behavioral cohort filter "${asText(item.value)}".`);
  if (typeof item.key !== 'string' || !storableText(item.key))
    throw new FilterError('A behavioral filter needs the event name as key.');
  let since: Date;
  if (item.explicit_datetime && !Number.isNaN(Date.parse(item.explicit_datetime))) {
    // PostgreSQL holds years 1–9999 here; an explicit date outside them is a malformed filter (400).
    if (!isStorableInstant(Date.parse(item.explicit_datetime)))
      throw new FilterError('"explicit_datetime" must fall within years 1 to 9999.');
    since = new Date(item.explicit_datetime);
  } else if (Number.isFinite(Number(item.time_value)) && INTERVALS[item.time_interval ?? 'day']) {
    const unit = INTERVALS[item.time_interval ?? 'day'];
    const at = new Date(now);
    const n = Number(item.time_value);
    if (unit === 'hours') at.setUTCHours(at.getUTCHours() - n);
    else if (unit === 'days') at.setUTCDate(at.getUTCDate() - n);
    else if (unit === 'weeks') at.setUTCDate(at.getUTCDate() - 7 * n);
    else if (unit === 'months') at.setUTCMonth(at.getUTCMonth() - n);
    else at.setUTCFullYear(at.getUTCFullYear() - n);
    if (!isStorableInstant(at.getTime())) throw new FilterError('"time_value" reaches outside years 1 to 9999.');
    since = at;
  } else {
    since = new Date(0);
  }
  const times = item.value === 'performed_event_multiple' ? Math.max(1, Number(item.operator_value) || 1) : 1;
  if (!Number.isFinite(times)) throw new FilterError('"operator_value" must be a number.');
  // The event filters are checked here, whichever engine then says them.
  propertyFiltersSql(item.event_filters ?? [], 'e.properties');
  // A count is whole: at least 2.5 times is at least 3 (and no count reaches past 2^53).
  return {
    event: item.key,
    since,
    times: Math.min(Math.ceil(times), Number.MAX_SAFE_INTEGER),
    eventFilters: item.event_filters ?? [],
  };
}

export interface CohortRef {
  id: number;
  name: string | null;
  count: number | null;
}

/**
 * The project's cohorts the person is in, by id, every cohort checked in one statement (behavioral
 * filters asked of the event store first, for this person alone). A cohort whose filters cannot be
 * evaluated is not reported as containing the person.
 */
export async function personCohorts(
  em: EntityManager,
  events: EventStore,
  projectId: number,
  personId: string,
): Promise<CohortRef[]> {
  const cohorts = (await db(em)
    .selectFrom('cohort')
    .select(['id', 'name', 'count', 'is_static', 'filters'])
    .where('project_id', '=', projectId)
    .where('deleted', '=', false)
    .orderBy('id')
    .execute()) as (CohortRef & { is_static: boolean; filters: { properties?: unknown } | null })[];
  const byId = new Map(cohorts.map((c) => [c.id, c]));
  const behavioral = await behavioralMembers(
    events,
    projectId,
    cohorts.map((c) => c.filters?.properties),
    [personId],
  );
  const checks: string[] = [];
  const params: unknown[] = [];
  for (const cohort of cohorts) {
    let members: SqlFragment;
    try {
      members = cohortMembersSql(cohort, byId, behavioral);
    } catch (error) {
      if (error instanceof FilterError) continue;
      throw error;
    }
    checks.push(`case when ${members.sql} then ${Number(cohort.id)} end`);
    params.push(...members.params);
  }
  if (checks.length === 0) return [];
  const [row] = await rows<{ ids: number[] }>(
    em,
    `select array_remove(array[${checks.join(', ')}]::int[], null) as ids from person p where p.id = ?`,
    [...params, personId],
  );
  const member = new Set(row?.ids ?? []);
  return cohorts.filter((c) => member.has(c.id)).map((c) => ({ id: c.id, name: c.name, count: c.count }));
}
