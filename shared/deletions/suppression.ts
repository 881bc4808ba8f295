// Suppression (opt-in, `suppress=true` on a deletion request): capture drops the later events of the
// erased persons' distinct ids until unsuppress lifts it. PostHog does not have it: there a new event
// makes a new person, which stays our default. The rows are deletion_suppression (migration 0049);
// capture reads them through a `SuppressionLookup` (the API process's cache, or PostgreSQL directly).
import type { EntityManager } from '@mikro-orm/postgresql';
import { type Kysely, sql } from 'kysely';
import { type DB, db, prepared } from '../platform/db/kysely.ts';
import { mergePartner, type IngestEvent } from '../persons/index.ts';
import type { IngestionWarningInput } from '../ingestion/index.ts';

/** The active suppressions among `distinctIds` of a project: distinct id → suppression row id. */
export type SuppressedIds = Map<string, string>;

/** How capture finds a project's active suppressions (api/capture/suppression-cache.ts keeps them in memory). */
export interface SuppressionLookup {
  suppressed(em: EntityManager, projectId: number, distinctIds: string[]): Promise<SuppressedIds>;
}

/** Reads PostgreSQL on every call: one index lookup. */
export const directLookup: SuppressionLookup = {
  suppressed: (em, projectId, distinctIds) => activeSuppressions(em, projectId, distinctIds),
};

export async function activeSuppressions(
  em: EntityManager,
  projectId: number,
  distinctIds: string[],
): Promise<SuppressedIds> {
  if (distinctIds.length === 0) return new Map();
  const found = await activeAmong(db(em), projectId, distinctIds);
  return new Map(found.map((r) => [r.distinct_id, r.id]));
}

// Capture's statement (every batch), built once.
const activeAmong = prepared((kysely: Kysely<DB>, projectId: number, distinctIds: string[]) =>
  kysely
    .selectFrom('deletion_suppression')
    .select((eb) => ['distinct_id', eb.cast<string>('id', 'text').as('id')])
    .where('project_id', '=', projectId)
    .where('lifted_at', 'is', null)
    .where((eb) => eb('distinct_id', '=', eb.fn.any(eb.val(distinctIds)))),
);

/**
 * A project's active suppressions, up to `limit` (null: more than that; the caller then looks up
 * each request's ids instead of holding them all).
 */
export async function projectSuppressions(
  em: EntityManager,
  projectId: number,
  limit: number,
): Promise<SuppressedIds | null> {
  const found = await db(em)
    .selectFrom('deletion_suppression')
    .select((eb) => ['distinct_id', eb.cast<string>('id', 'text').as('id')])
    .where('project_id', '=', projectId)
    .where('lifted_at', 'is', null)
    .limit(limit + 1)
    .execute();
  if (found.length > limit) return null;
  return new Map(found.map((r) => [r.distinct_id, r.id]));
}

export interface SuppressionOutcome {
  /** The events to ingest, in their order. */
  kept: IngestEvent[];
  /** Events dropped per suppression row id. */
  dropped: Map<string, number>;
  droppedTotal: number;
  /** One warning for the request when it dropped any (`event_dropped_suppressed`), else none. */
  warnings: IngestionWarningInput[];
}

/**
 * Splits a capture request's events: those of a suppressed distinct id (or merging with one) are
 * dropped. A project without suppressions costs the lookup's answer only (from memory with the cache).
 */
export async function dropSuppressed(
  em: EntityManager,
  lookup: SuppressionLookup,
  projectId: number,
  events: IngestEvent[],
): Promise<SuppressionOutcome> {
  const none = { kept: events, dropped: new Map(), droppedTotal: 0, warnings: [] };
  if (events.length === 0) return none;
  const ids = new Set<string>();
  for (const e of events) {
    ids.add(e.distinctId);
    const partner = mergePartner(e);
    if (partner !== null) ids.add(partner);
  }
  const suppressed = await lookup.suppressed(em, projectId, [...ids]);
  if (suppressed.size === 0) return none;
  const kept: IngestEvent[] = [];
  const dropped = new Map<string, number>();
  const droppedIds = new Set<string>();
  for (const e of events) {
    const partner = mergePartner(e);
    const hit = suppressed.has(e.distinctId)
      ? e.distinctId
      : partner !== null && suppressed.has(partner)
        ? partner
        : null;
    if (hit === null) {
      kept.push(e);
      continue;
    }
    const rowId = suppressed.get(hit)!;
    dropped.set(rowId, (dropped.get(rowId) ?? 0) + 1);
    droppedIds.add(hit);
  }
  const droppedTotal = events.length - kept.length;
  if (droppedTotal === 0) return none;
  const list = [...droppedIds];
  return {
    kept,
    dropped,
    droppedTotal,
    warnings: [
      {
        type: 'event_dropped_suppressed',
        eventUuid: null,
        distinctId: list.length === 1 ? list[0] : null,
        details: {
          droppedEvents: droppedTotal,
          distinctIds: list.slice(0, 20),
          reason: 'the distinct id is suppressed by a deletion request (suppress=true); unsuppress it to capture again',
        },
      },
    ],
  };
}

/** Adds a request's dropped events to their suppression rows, in one statement. */
export async function countDropped(em: EntityManager, dropped: Map<string, number>): Promise<void> {
  if (dropped.size === 0) return;
  await db(em)
    .updateTable('deletion_suppression')
    .from(
      sql<{
        id: string;
        n: string;
      }>`unnest(${[...dropped.keys()]}::bigint[], ${[...dropped.values()]}::bigint[])`.as<'d'>(sql`d(id, n)`),
    )
    .set((eb) => ({ dropped_count: eb('deletion_suppression.dropped_count', '+', eb.ref('d.n')) }))
    .whereRef('deletion_suppression.id', '=', 'd.id')
    .execute();
}

/**
 * Suppresses distinct ids for deletion requests (in the request's transaction): one row per distinct
 * id; an id already suppressed stays with its earlier request. Returns the distinct ids newly suppressed per request.
 */
export async function recordSuppressions(
  em: EntityManager,
  projectId: number,
  targets: { requestId: string; distinctIds: string[] }[],
): Promise<Map<string, string[]>> {
  const pairs = targets.flatMap((t) => t.distinctIds.map((d) => [t.requestId, d] as const));
  const made = new Map<string, string[]>();
  if (pairs.length === 0) return made;
  const inserted = await db(em)
    .insertInto('deletion_suppression')
    .columns(['project_id', 'distinct_id', 'request_id'])
    .expression((eb) =>
      eb
        .selectFrom(
          sql<{ request_id: string; distinct_id: string }>`unnest(${pairs.map((p) => p[0])}::bigint[], ${pairs.map(
            (p) => p[1],
          )}::text[])`.as<'d'>(sql`d(request_id, distinct_id)`),
        )
        .select([eb.val(projectId).as('project_id'), 'd.distinct_id', 'd.request_id']),
    )
    // The arbiter is the partial unique index of active rows.
    .onConflict((oc) => oc.columns(['project_id', 'distinct_id']).where('lifted_at', 'is', null).doNothing())
    .returning((eb) => [eb.cast<string>('request_id', 'text').as('request_id'), 'distinct_id'])
    .execute();
  for (const r of inserted) made.set(r.request_id, [...(made.get(r.request_id) ?? []), r.distinct_id]);
  return made;
}

/** Lifts a request's active suppressions; returns the distinct ids lifted now, and whether it ever had any. */
export async function liftSuppressions(
  em: EntityManager,
  requestId: string,
): Promise<{ lifted: string[]; hadAny: boolean }> {
  const lifted = await db(em)
    .updateTable('deletion_suppression')
    .set({ lifted_at: sql`now()` })
    .where('request_id', '=', requestId)
    .where('lifted_at', 'is', null)
    .returning('distinct_id')
    .execute();
  if (lifted.length > 0) return { lifted: lifted.map((r) => r.distinct_id), hadAny: true };
  const any = await db(em)
    .selectFrom('deletion_suppression')
    .select(sql.lit(1).as('one'))
    .where('request_id', '=', requestId)
    .limit(1)
    .executeTakeFirst();
  return { lifted: [], hadAny: any !== undefined };
}
