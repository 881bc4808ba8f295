// The tracking plan's tables: plan versions, the quarantine, violation counts and replays. This module
// is the only one that writes them.
import type { EntityManager } from '@mikro-orm/postgresql';
import { type ExpressionBuilder, sql } from 'kysely';
import { type DB, db } from '../platform/db/kysely.ts';
import { namedStatement } from '../platform/db/sql.ts';
import { type Page, pagedSelect } from '../platform/db/paged.ts';
import type { HeldEvent, Violation } from './plan.ts';

export interface PlanVersionRow {
  version: number;
  document: Record<string, unknown>;
  created_by_id: number | null;
  created_at: Date;
}

/** The version in force (the newest), or null: the project has no plan. */
export async function currentPlanVersion(em: EntityManager, projectId: number): Promise<PlanVersionRow | null> {
  const row = await db(em)
    .selectFrom('tracking_plan_version')
    .select(['version', 'document', 'created_by_id', 'created_at'])
    .where('project_id', '=', projectId)
    .orderBy('version', 'desc')
    .limit(1)
    .executeTakeFirst();
  return row ?? null;
}

/** The project's versions, newest first. */
export function listPlanVersions(em: EntityManager, projectId: number, page: Page) {
  const query = db(em)
    .selectFrom('tracking_plan_version')
    .select(['version', 'document', 'created_by_id', 'created_at'])
    .where('project_id', '=', projectId)
    .orderBy('version', 'desc');
  return pagedSelect(em, query, page);
}

/**
 * Stores `document` as the project's next version (one more than the newest), made by `userId`.
 * Two concurrent PUTs: the second waits on the project's lock and takes the following number.
 */
export async function insertPlanVersion(
  em: EntityManager,
  projectId: number,
  document: unknown,
  userId: number | null,
): Promise<PlanVersionRow> {
  return em.transactional(async (tx) => {
    await sql`select pg_advisory_xact_lock(hashtext('tracking_plan'), ${projectId})`.execute(db(tx));
    return db(tx)
      .insertInto('tracking_plan_version')
      .columns(['project_id', 'version', 'document', 'created_by_id'])
      .expression((eb) =>
        eb
          .selectFrom('tracking_plan_version')
          .select([
            eb.val(projectId).as('project_id'),
            sql<number>`coalesce(max(version), 0) + 1`.as('version'),
            sql<string>`${JSON.stringify(document)}::jsonb`.as('document'),
            eb.val(userId).as('created_by_id'),
          ])
          .where('project_id', '=', projectId),
      )
      .returning(['version', 'document', 'created_by_id', 'created_at'])
      .executeTakeFirstOrThrow();
  });
}

/** Holds quarantined events (an event already held, by uuid, is left as it is: an SDK's retry). */
export async function holdEvents(
  em: EntityManager,
  projectId: number,
  planVersion: number,
  held: readonly HeldEvent[],
): Promise<void> {
  if (held.length === 0) return;
  const payload = JSON.stringify(
    held.map((h) => ({
      uuid: h.event.uuid,
      event: h.event.event,
      distinct_id: h.event.distinctId,
      properties: h.event.properties,
      timestamp: h.event.timestamp.toISOString(),
      violations: h.violations,
    })),
  );
  await db(em)
    .insertInto('quarantined_event')
    .columns(['project_id', 'uuid', 'event', 'distinct_id', 'properties', 'timestamp', 'violations', 'plan_version'])
    .expression((eb) =>
      eb
        .selectFrom(
          sql<{
            uuid: string;
            event: string;
            distinct_id: string;
            properties: Record<string, unknown>;
            timestamp: Date;
            violations: unknown[];
          }>`jsonb_to_recordset(${payload}::jsonb)`.as<'r'>(
            sql`r(uuid uuid, event text, distinct_id text, properties jsonb, timestamp timestamptz, violations jsonb)`,
          ),
        )
        .select([
          eb.val(projectId).as('project_id'),
          'r.uuid',
          'r.event',
          'r.distinct_id',
          'r.properties',
          'r.timestamp',
          'r.violations',
          eb.val(planVersion).as('plan_version'),
        ]),
    )
    .onConflict((oc) => oc.columns(['project_id', 'uuid']).doNothing())
    .execute();
}

/** Adds violations to their counters (per event name, plan version and kind), in one statement. */
export async function addViolationCounts(
  em: EntityManager,
  projectId: number,
  planVersion: number,
  counts: Iterable<{ event: string; kind: string; count: number }>,
): Promise<void> {
  const list = [...counts];
  if (list.length === 0) return;
  // One row per key, in a fixed order: concurrent requests lock the counters in the same order.
  list.sort((a, b) => (a.event < b.event ? -1 : a.event > b.event ? 1 : a.kind < b.kind ? -1 : 1));
  await db(em)
    .insertInto('plan_violation_count')
    .values(
      list.map((c) => ({
        project_id: projectId,
        event: c.event,
        plan_version: planVersion,
        kind: c.kind.slice(0, 100),
        count: String(c.count),
      })),
    )
    .onConflict((oc) =>
      oc.columns(['project_id', 'event', 'plan_version', 'kind']).doUpdateSet((eb) => ({
        count: eb('plan_violation_count.count', '+', eb.ref('excluded.count')),
        last_seen_at: sql<Date>`now()`,
      })),
    )
    .execute();
}

export interface ViolationCountRow {
  event: string;
  plan_version: number;
  kind: string;
  count: number;
  last_seen_at: Date;
}

/** The violation counters of these event names. */
export async function violationCountsOf(
  em: EntityManager,
  projectId: number,
  events: string[],
): Promise<ViolationCountRow[]> {
  if (events.length === 0) return [];
  return db(em)
    .selectFrom('plan_violation_count')
    .select(['event', 'plan_version', 'kind', sql<number>`count::float8`.as('count'), 'last_seen_at'])
    .where('project_id', '=', projectId)
    .where('event', 'in', events)
    .orderBy('event')
    .orderBy('plan_version', 'desc')
    .orderBy('kind')
    .execute();
}

export interface QuarantineFilter {
  event?: string;
  /** Quarantined at or after. */
  since?: Date;
  /** Quarantined at or before (a replay's own start). */
  until?: Date;
}

const quarantineWhere = (em: EntityManager, projectId: number, filter: QuarantineFilter) => {
  let query = db(em).selectFrom('quarantined_event').where('project_id', '=', projectId);
  if (filter.event !== undefined) query = query.where('event', '=', filter.event);
  if (filter.since !== undefined) query = query.where('quarantined_at', '>=', filter.since);
  if (filter.until !== undefined) query = query.where('quarantined_at', '<=', filter.until);
  return query;
};

/** A page of the project's quarantine, newest first. */
export function listQuarantine(em: EntityManager, projectId: number, filter: QuarantineFilter, page: Page) {
  const query = quarantineWhere(em, projectId, filter)
    .select([
      'id',
      'uuid',
      'event',
      'distinct_id',
      'properties',
      'timestamp',
      'violations',
      'plan_version',
      'quarantined_at',
    ])
    .orderBy('quarantined_at', 'desc')
    .orderBy('id', 'desc');
  return pagedSelect(em, query, page, { exactUpTo: 100_000 });
}

/** How many quarantined events a filter selects. */
export async function countQuarantine(em: EntityManager, projectId: number, filter: QuarantineFilter) {
  const row = await quarantineWhere(em, projectId, filter)
    .select(sql<number>`count(*)::float8`.as('n'))
    .executeTakeFirstOrThrow();
  return Number(row.n);
}

export interface QuarantinedRow {
  id: string;
  uuid: string;
  event: string;
  distinct_id: string;
  properties: Record<string, unknown>;
  timestamp: Date;
  quarantined_at: Date;
}

/**
 * Claims the next `limit` quarantined events of a filter after id `afterId`, locking them for the
 * caller's transaction; rows another replay holds are skipped (it stores or keeps them).
 */
export async function claimQuarantined(
  tx: EntityManager,
  projectId: number,
  filter: QuarantineFilter,
  afterId: string,
  limit: number,
): Promise<QuarantinedRow[]> {
  const found = await quarantineWhere(tx, projectId, filter)
    .select(['id', 'uuid', 'event', 'distinct_id', 'properties', 'timestamp', 'quarantined_at'])
    .where('id', '>', afterId)
    .orderBy('id')
    .limit(limit)
    .forUpdate()
    .skipLocked()
    .execute();
  return found.map((r) => ({ ...r, id: String(r.id) }));
}

/** The quarantined events of a filter, for a dry run: the first `limit` of them (not locked). */
export async function readQuarantined(
  em: EntityManager,
  projectId: number,
  filter: QuarantineFilter,
  limit: number,
): Promise<QuarantinedRow[]> {
  const found = await quarantineWhere(em, projectId, filter)
    .select(['id', 'uuid', 'event', 'distinct_id', 'properties', 'timestamp', 'quarantined_at'])
    .orderBy('id')
    .limit(limit)
    .execute();
  return found.map((r) => ({ ...r, id: String(r.id) }));
}

/** Releases quarantined events (stored or dropped by a replay), in the claiming transaction. */
export async function releaseQuarantined(tx: EntityManager, ids: string[]): Promise<void> {
  if (ids.length === 0) return;
  await db(tx).deleteFrom('quarantined_event').where('id', 'in', ids).execute();
}

/** Events still violating after a replay: their violations and plan version as of now. */
export async function keepQuarantined(
  tx: EntityManager,
  planVersion: number,
  kept: { id: string; violations: Violation[] }[],
): Promise<void> {
  if (kept.length === 0) return;
  const payload = JSON.stringify(kept);
  await db(tx)
    .updateTable('quarantined_event as q')
    .from(
      sql<{ id: string; violations: unknown[] }>`jsonb_to_recordset(${payload}::jsonb)`.as<'r'>(
        sql`r(id bigint, violations jsonb)`,
      ),
    )
    .set((eb) => ({ violations: eb.ref('r.violations'), plan_version: planVersion }))
    .whereRef('q.id', '=', 'r.id')
    .execute();
}

/**
 * The distinct ids among `distinctIds` whose person was deleted after `since` (a person deletion request
 * naming them), with the time of the latest such request.
 */
export async function deletedSince(
  em: EntityManager,
  projectId: number,
  distinctIds: string[],
  since: Date,
): Promise<Map<string, Date>> {
  if (distinctIds.length === 0) return new Map();
  const found = await db(em)
    .selectFrom('async_deletion')
    .innerJoinLateral(sql<{ id: string }>`unnest(async_deletion.distinct_ids)`.as<'u'>(sql`u(id)`), (join) =>
      join.onTrue(),
    )
    .select(['u.id', (eb) => eb.fn.max('async_deletion.created_at').as('at')])
    .where('async_deletion.project_id', '=', projectId)
    .where('async_deletion.created_at', '>', since)
    .where(sql<boolean>`async_deletion.distinct_ids && ${sql.val(distinctIds)}::text[]`)
    .where('u.id', 'in', distinctIds)
    .groupBy('u.id')
    .execute();
  return new Map(found.map((r) => [r.id, new Date(r.at)]));
}

/**
 * A deleted person's held events: those of their distinct ids quarantined by the request's cutoff, as
 * a person's deletion removes them (what a receipt cites as the statement that verified none survived).
 */
export const QUARANTINE_SURVIVORS_STATEMENT = namedStatement(
  `select count(*)::int as n from quarantined_event where project_id = ? and distinct_id = any(?) and quarantined_at <= ?`,
  ['project_id', 'distinct_ids', 'cutoff'],
);

/** The held events of these distinct ids quarantined by `cutoff` (QUARANTINE_SURVIVORS_STATEMENT's condition). */
const held =
  (projectId: number, distinctIds: readonly string[], cutoff: string) =>
  (eb: ExpressionBuilder<DB, 'quarantined_event'>) =>
    eb.and([
      eb('project_id', '=', projectId),
      eb('distinct_id', '=', sql<string>`any(${sql.val(distinctIds)}::text[])`),
      eb('quarantined_at', '<=', sql<Date>`${cutoff}::timestamptz`),
    ]);

/** Deletes the held events of these distinct ids quarantined by `cutoff`; returns how many of each distinct id went. */
export async function deleteHeldEvents(
  em: EntityManager,
  projectId: number,
  distinctIds: readonly string[],
  cutoff: string,
): Promise<Map<string, number>> {
  const gone = new Map<string, number>();
  if (distinctIds.length === 0) return gone;
  const deleted = await db(em)
    .deleteFrom('quarantined_event')
    .where(held(projectId, distinctIds, cutoff))
    .returning('distinct_id')
    .execute();
  for (const r of deleted) gone.set(r.distinct_id, (gone.get(r.distinct_id) ?? 0) + 1);
  return gone;
}

/** QUARANTINE_SURVIVORS_STATEMENT over several (distinct ids, cutoff) groups: zero once their deletions are done. */
export async function countHeldEvents(
  em: EntityManager,
  projectId: number,
  groups: readonly { distinctIds: readonly string[]; cutoff: string }[],
): Promise<number> {
  let n = 0;
  for (const g of groups) {
    if (g.distinctIds.length === 0) continue;
    const found = await db(em)
      .selectFrom('quarantined_event')
      .select((eb) => eb.fn.countAll<string>().as('n'))
      .where(held(projectId, g.distinctIds, g.cutoff))
      .executeTakeFirstOrThrow();
    n += Number(found.n);
  }
  return n;
}

/** Deletes quarantined events older than `days` days, and those of persons deleted since they were held. */
export async function purgeQuarantine(em: EntityManager, days: number): Promise<number> {
  const old = await db(em)
    .deleteFrom('quarantined_event')
    .where('quarantined_at', '<', sql<Date>`now() - make_interval(days => ${days})`)
    .executeTakeFirst();
  const erased = await db(em)
    .deleteFrom('quarantined_event as q')
    .where((eb) =>
      eb.exists(
        eb
          .selectFrom('async_deletion as d')
          .select(sql`1`.as('one'))
          .whereRef('d.project_id', '=', 'q.project_id')
          .whereRef('d.created_at', '>', 'q.quarantined_at')
          .where(sql<boolean>`q.distinct_id = any(d.distinct_ids)`),
      ),
    )
    .executeTakeFirst();
  return Number(old.numDeletedRows) + Number(erased.numDeletedRows);
}

// ---- replays ----------------------------------------------------------------------------------

export interface ReplayRow {
  id: string;
  project_id: number;
  filter: Record<string, unknown>;
  requested_by_id: number | null;
  created_at: Date;
  status: string;
  selected: number;
  stored: number;
  still_violating: number;
  dropped: number;
  finished_at: Date | null;
  last_error: string | null;
}

const replayColumns = [
  'id',
  'project_id',
  'filter',
  'requested_by_id',
  'created_at',
  'status',
  sql<number>`selected::float8`.as('selected'),
  sql<number>`stored::float8`.as('stored'),
  sql<number>`still_violating::float8`.as('still_violating'),
  sql<number>`dropped::float8`.as('dropped'),
  'finished_at',
  'last_error',
] as const;

export async function insertReplay(
  tx: EntityManager,
  projectId: number,
  filter: Record<string, unknown>,
  userId: number | null,
  status: string,
): Promise<ReplayRow> {
  const row = await db(tx)
    .insertInto('tracking_plan_replay')
    .values({
      project_id: projectId,
      filter: sql<Record<string, unknown>>`${JSON.stringify(filter)}::jsonb`,
      requested_by_id: userId,
      status,
    })
    .returning(replayColumns)
    .executeTakeFirstOrThrow();
  return { ...row, id: String(row.id) };
}

export async function findReplay(em: EntityManager, id: string, projectId?: number): Promise<ReplayRow | null> {
  let query = db(em).selectFrom('tracking_plan_replay').select(replayColumns).where('id', '=', id);
  if (projectId !== undefined) query = query.where('project_id', '=', projectId);
  const row = await query.executeTakeFirst();
  return row ? { ...row, id: String(row.id) } : null;
}

/** Adds a batch's counts to a replay (in the batch's transaction), and sets its status. */
export async function advanceReplay(
  tx: EntityManager,
  id: string,
  counts: { selected: number; stored: number; still_violating: number; dropped: number },
  status: string,
  error: string | null = null,
): Promise<void> {
  await db(tx)
    .updateTable('tracking_plan_replay')
    .set((eb) => ({
      selected: eb('selected', '+', String(counts.selected)),
      stored: eb('stored', '+', String(counts.stored)),
      still_violating: eb('still_violating', '+', String(counts.still_violating)),
      dropped: eb('dropped', '+', String(counts.dropped)),
      status,
      last_error: error,
      finished_at: status === 'done' || status === 'failed' ? sql<Date>`now()` : null,
    }))
    .where('id', '=', id)
    .execute();
}

/** Replays queued or running since more than `graceSeconds` (of `among`, when given). */
export async function unfinishedReplayIds(
  em: EntityManager,
  graceSeconds: number,
  among?: string[],
): Promise<string[]> {
  if (among && among.length === 0) return [];
  let query = db(em)
    .selectFrom('tracking_plan_replay')
    .select('id')
    .where('status', 'in', ['queued', 'running'])
    .where('created_at', '<', sql<Date>`now() - make_interval(secs => ${graceSeconds})`)
    .orderBy('id')
    .limit(1000);
  if (among) query = query.where('id', 'in', among);
  return (await query.execute()).map((r) => String(r.id));
}
