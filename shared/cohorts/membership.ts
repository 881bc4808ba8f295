// Cohort membership as SQL over `person p`: static cohorts through cohort_person, dynamic cohorts by
// evaluating their filters — person properties, nested cohorts, and PostHog's behavioral
// "performed_event" filters (used by experiment exposure cohorts). Used by person lists (cohort
// filters) and the persons `cohorts` endpoint.
import type { EntityManager } from '@mikro-orm/postgresql';
import {
  FilterError,
  filterItems,
  propertyFiltersSql,
  storableText,
  type PropertyFilterItem,
  type SpecialFilter,
  type SqlFragment,
} from '../persons/property-filters.ts';
import { isStorableInstant } from '../time.ts';
import { rows } from '../db/sql.ts';

interface CohortRow {
  id: number;
  is_static: boolean;
  filters: { properties?: unknown } | null;
}

const INTERVALS: Record<string, string> = { day: 'days', week: 'weeks', month: 'months', year: 'years', hour: 'hours' };
const MAX_NESTING = 5;

/** The ids of cohorts a filter tree refers to. */
function referencedCohorts(filters: unknown): Set<number> {
  const ids = filterItems(filters)
    .filter((item) => item.type === 'cohort' || item.type === 'precalculated-cohort' || item.type === 'static-cohort')
    .map((item) => Number(item.value));
  return new Set(ids.filter(Number.isInteger));
}

/** Loads every cohort `filters` refers to (transitively) and returns a resolver for cohort and behavioral items. */
export async function cohortFilterResolver(
  em: EntityManager,
  projectId: number,
  filters: unknown,
): Promise<SpecialFilter> {
  const cohorts = new Map<number, CohortRow>();
  let pending = [...referencedCohorts(filters)];
  for (let depth = 0; pending.length && depth < MAX_NESTING; depth++) {
    const found = await rows<CohortRow>(
      em,
      `select id, is_static, filters from cohort where project_id = ? and not deleted and id in (?)`,
      [projectId, pending],
    );
    for (const row of found) cohorts.set(row.id, row);
    pending = found.flatMap((r) => [...referencedCohorts(r.filters?.properties)]).filter((id) => !cohorts.has(id));
  }
  return buildResolver(projectId, cohorts, 0);
}

function buildResolver(projectId: number, cohorts: Map<number, CohortRow>, depth: number): SpecialFilter {
  const resolve: SpecialFilter = (item) => {
    if (item.type === 'cohort' || item.type === 'precalculated-cohort' || item.type === 'static-cohort') {
      const cohort = cohorts.get(Number(item.value));
      if (!cohort) throw new FilterError(`Cohort ${asText(item.value)} does not exist in this project.`);
      const members = cohortMembersSql(projectId, cohort, cohorts, depth + 1);
      return item.operator === 'not_in' ? { sql: `not (${members.sql})`, params: members.params } : members;
    }
    if (item.type === 'behavioral') return behavioralSql(projectId, item as BehavioralItem);
    return undefined;
  };
  return resolve;
}

const asText = (v: unknown) => (typeof v === 'string' ? v : JSON.stringify(v));

/** SQL true when person `p` is in `cohort`. */
export function cohortMembersSql(
  projectId: number,
  cohort: CohortRow,
  cohorts: Map<number, CohortRow>,
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
  return propertyFiltersSql(tree, 'p.properties', buildResolver(projectId, cohorts, depth));
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
function behavioralSql(projectId: number, item: BehavioralItem): SqlFragment {
  if (item.value !== 'performed_event' && item.value !== 'performed_event_multiple')
    throw new FilterError(`Unsupported behavioral cohort filter "${asText(item.value)}".`);
  if (typeof item.key !== 'string' || !storableText(item.key))
    throw new FilterError('A behavioral filter needs the event name as key.');
  let since: string;
  if (item.explicit_datetime && !Number.isNaN(Date.parse(item.explicit_datetime))) {
    // PostgreSQL holds years 1–9999 here; an explicit date outside them is a malformed filter (400).
    if (!isStorableInstant(Date.parse(item.explicit_datetime)))
      throw new FilterError('"explicit_datetime" must fall within years 1 to 9999.');
    since = new Date(item.explicit_datetime).toISOString();
  } else if (Number.isFinite(Number(item.time_value)) && INTERVALS[item.time_interval ?? 'day']) {
    const unit = INTERVALS[item.time_interval ?? 'day'];
    const at = new Date();
    const n = Number(item.time_value);
    if (unit === 'hours') at.setUTCHours(at.getUTCHours() - n);
    else if (unit === 'days') at.setUTCDate(at.getUTCDate() - n);
    else if (unit === 'weeks') at.setUTCDate(at.getUTCDate() - 7 * n);
    else if (unit === 'months') at.setUTCMonth(at.getUTCMonth() - n);
    else at.setUTCFullYear(at.getUTCFullYear() - n);
    if (!isStorableInstant(at.getTime())) throw new FilterError('"time_value" reaches outside years 1 to 9999.');
    since = at.toISOString();
  } else {
    since = new Date(0).toISOString();
  }
  const eventFilter = propertyFiltersSql(item.event_filters ?? [], 'e.properties');
  const times = item.value === 'performed_event_multiple' ? Math.max(1, Number(item.operator_value) || 1) : 1;
  // Infinity would reach the SQL text as a bare word.
  if (!Number.isFinite(times)) throw new FilterError('"operator_value" must be a number.');
  const sql = `(select count(*) from event e
      where e.project_id = ? and e.event = ? and e.timestamp >= ?::timestamptz and ${eventFilter.sql}
        and e.distinct_id in (select d.distinct_id from person_distinct_id d where d.person_id = p.id)) >= ?`;
  const fragment = { sql, params: [projectId, item.key, since, ...eventFilter.params, times] };
  return item.negation ? { sql: `not (${fragment.sql})`, params: fragment.params } : fragment;
}
