// The tracking plan's rules: replacing a plan (a new version), what a proposed plan would change, and
// applying the plan in force to a capture request's events.
import type { EntityManager } from '@mikro-orm/postgresql';
import type { EventStore } from '../events/index.ts';
import type { IngestEvent } from '../persons/index.ts';
import type { IngestionWarningInput } from '../ingestion/index.ts';
import {
  type CompiledPlan,
  checkEvent,
  compilePlan,
  type Enforcement,
  enforcePlan,
  matchingDropRule,
  type PlanDocument,
} from './plan.ts';
import type { Deps } from '../platform/deps.ts';
import type { HeldEventStore } from '../deletions/index.ts';
import {
  QUARANTINE_SURVIVORS_STATEMENT,
  addViolationCounts,
  countHeldEvents,
  currentPlanVersion,
  deleteHeldEvents,
  holdEvents,
  insertPlanVersion,
  type PlanVersionRow,
  purgeQuarantine,
  violationCountsOf,
} from './store.ts';

/** The plan in force for a project, compiled (null: the project has none). */
export async function loadPlan(em: EntityManager, projectId: number): Promise<CompiledPlan | null> {
  const row = await currentPlanVersion(em, projectId);
  return row === null ? null : compilePlan(row.document, row.version);
}

/** Replaces the project's plan: checks and compiles `document` (PlanInputError), stores it as a new version. */
export async function putPlan(
  em: EntityManager,
  projectId: number,
  userId: number | null,
  document: unknown,
): Promise<PlanVersionRow> {
  compilePlan(document, 0);
  return insertPlanVersion(em, projectId, document, userId);
}

/** The days of events a proposed plan is checked against, and at most how many of them. */
export const DIFF_DAYS = 7;
export const DIFF_SAMPLE = 20_000;

export interface PlanDiff {
  current_version: number | null;
  events_added: string[];
  events_removed: string[];
  /** Events in both whose schema or mode differ. */
  events_changed: { event: string; schema_changed: boolean; mode_before: string; mode_after: string }[];
  default_mode: { before: string | null; after: string };
  drop_rules: { before: number; after: number };
  last_7_days: {
    /** Events of the project in the last 7 days. */
    events: number;
    /** How many of them were checked (the newest; all when `sampled` is false). */
    checked: number;
    sampled: boolean;
    /** Of those checked: how many the proposed plan finds violating, or drops by a rule. */
    would_violate: number;
    /** Of those checked: how many the plan in force finds violating (for comparison). */
    violate_now: number;
    /** `would_violate` scaled to all the events of the window (equal to it when not sampled). */
    would_violate_estimate: number;
    /** Per event name with violations under the proposed plan: how many, and what the proposed mode does. */
    by_event: { event: string; would_violate: number; mode: string }[];
  };
}

const canonical = (value: unknown) =>
  JSON.stringify(value ?? null, (_k, v) =>
    v && typeof v === 'object' && !Array.isArray(v)
      ? Object.fromEntries(
          Object.keys(v)
            .sort()
            .map((k) => [k, v[k]]),
        )
      : v,
  );

/** Whether an event breaks `plan` (a drop rule or a violation), and the mode applied. */
function breaks(plan: CompiledPlan, e: { event: string; properties: Record<string, unknown> }) {
  const asIngest = { uuid: '', distinctId: String(e.properties.distinct_id ?? ''), timestamp: new Date(0), ...e };
  if (plan.dropRules.length > 0 && matchingDropRule(plan, asIngest) >= 0) return 'drop_rule';
  const { mode, violations } = checkEvent(plan, e.event, e.properties);
  return violations.length > 0 ? mode : null;
}

/**
 * What a proposed plan (PlanInputError when invalid) would change against the plan in force, and how
 * many of the last DIFF_DAYS days' events it would find violating: checked on the newest DIFF_SAMPLE of
 * them read through the event store (every one when there are no more), scaled when sampled.
 */
export async function diffPlan(
  em: EntityManager,
  events: EventStore,
  projectId: number,
  proposed: unknown,
  now = new Date(),
): Promise<PlanDiff> {
  const next = compilePlan(proposed, 0);
  const current = await loadPlan(em, projectId);
  const before: PlanDocument = current?.document ?? {};
  const after = next.document;
  const beforeEvents = before.events ?? {};
  const afterEvents = after.events ?? {};
  const changed: PlanDiff['events_changed'] = [];
  for (const [event, entry] of Object.entries(afterEvents)) {
    const old = beforeEvents[event];
    if (old === undefined) continue;
    const schemaChanged = canonical(old.schema) !== canonical(entry.schema);
    const modeBefore = old.mode ?? 'allow';
    const modeAfter = entry.mode ?? 'allow';
    if (schemaChanged || modeBefore !== modeAfter)
      changed.push({ event, schema_changed: schemaChanged, mode_before: modeBefore, mode_after: modeAfter });
  }
  const since = new Date(now.getTime() - DIFF_DAYS * 86_400_000);
  const sample = await events.recentEventSample(projectId, since, DIFF_SAMPLE);
  let wouldViolate = 0;
  let violateNow = 0;
  const byEvent = new Map<string, { would_violate: number; mode: string }>();
  for (const e of sample.events) {
    const outcome = breaks(next, e);
    if (current !== null && breaks(current, e) !== null) violateNow++;
    if (outcome === null) continue;
    wouldViolate++;
    const entry = byEvent.get(e.event) ?? { would_violate: 0, mode: outcome };
    entry.would_violate++;
    byEvent.set(e.event, entry);
  }
  const checked = sample.events.length;
  const sampled = checked < sample.total;
  return {
    current_version: current?.version ?? null,
    events_added: Object.keys(afterEvents).filter((e) => !(e in beforeEvents)),
    events_removed: Object.keys(beforeEvents).filter((e) => !(e in afterEvents)),
    events_changed: changed,
    default_mode: { before: current === null ? null : (before.default_mode ?? 'allow'), after: next.defaultMode },
    drop_rules: { before: before.drop_rules?.length ?? 0, after: next.dropRules.length },
    last_7_days: {
      events: sample.total,
      checked,
      sampled,
      would_violate: wouldViolate,
      violate_now: violateNow,
      would_violate_estimate:
        sampled && checked > 0 ? Math.round((wouldViolate * sample.total) / checked) : wouldViolate,
      by_event: [...byEvent].map(([event, v]) => ({ event, ...v })).sort((a, b) => b.would_violate - a.would_violate),
    },
  };
}

/** What capture does with a request's events under the plan in force. */
export interface CaptureEnforcement {
  /** The events to ingest. */
  kept: IngestEvent[];
  /** One per event not stored as sent, for the request's ingestion warnings. */
  warnings: IngestionWarningInput[];
  /** Events per outcome with violations or a drop rule (for the Prometheus counter). */
  outcomes: Map<string, number>;
  /** Violations per kind (for the Prometheus counter). */
  kinds: Map<string, number>;
  /** Adds the violations to their counters: after the request's events are committed (a statistic). */
  count: (em: EntityManager) => Promise<void>;
}

/**
 * Applies `plan` to a capture request's events: holds the quarantined ones (before the others are
 * stored; a retry holds nothing twice) and answers what to store and warn about.
 */
export async function enforceAtCapture(
  em: EntityManager,
  projectId: number,
  plan: CompiledPlan,
  events: IngestEvent[],
): Promise<CaptureEnforcement> {
  const done: Enforcement = enforcePlan(plan, events);
  await holdEvents(em, projectId, plan.version, done.quarantined);
  const kinds = new Map<string, number>();
  for (const c of done.counts.values()) kinds.set(c.kind, (kinds.get(c.kind) ?? 0) + c.count);
  return {
    kept: done.kept,
    warnings: done.warnings,
    outcomes: done.outcomes,
    kinds,
    count: (tx) => addViolationCounts(tx, projectId, plan.version, done.counts.values()),
  };
}

export interface EventViolations {
  /** All violations of the event, every version and kind. */
  total: number;
  /** Per plan version and violation kind, newest version first. */
  counts: { plan_version: number; kind: string; count: number; last_seen_at: string }[];
}

/** The violation counters of these event names, by name (names without any are left out). */
export async function violationsByEvent(
  em: EntityManager,
  projectId: number,
  names: string[],
): Promise<Map<string, EventViolations>> {
  const found = new Map<string, EventViolations>();
  for (const row of await violationCountsOf(em, projectId, [...new Set(names)])) {
    const entry = found.get(row.event) ?? { total: 0, counts: [] };
    entry.total += row.count;
    entry.counts.push({
      plan_version: row.plan_version,
      kind: row.kind,
      count: row.count,
      last_seen_at: new Date(row.last_seen_at).toISOString(),
    });
    found.set(row.event, entry);
  }
  return found;
}

/** The daily upkeep's part (scheduler `event-partitions`): quarantined events past QUARANTINE_RETENTION_DAYS. */
export async function purgeQuarantineJob(
  _job: unknown,
  deps: Pick<Deps, 'orm' | 'logger' | 'config'>,
): Promise<{ quarantinedEventsPurged: number }> {
  const quarantinedEventsPurged = await purgeQuarantine(
    deps.orm.em.fork(),
    deps.config.trackingPlan.quarantineRetentionDays,
  );
  if (quarantinedEventsPurged > 0) deps.logger.info({ quarantinedEventsPurged }, 'quarantined events purged');
  return { quarantinedEventsPurged };
}

/**
 * The quarantine as a person's event deletion sees it (the worker binds it to the deletion job): a
 * deleted person's held events go with their stored ones, counted in the receipt as `quarantined_events`.
 */
export const quarantineHeldStore: HeldEventStore = {
  name: 'quarantined_events',
  statement: QUARANTINE_SURVIVORS_STATEMENT,
  delete: deleteHeldEvents,
  count: countHeldEvents,
};
