// Ingesting a request's events: persons, events, recordings and the ingestion warnings of events
// dropped or altered in one transaction (or one statement), so a 200 means everything is committed and a
// failure stores nothing.
import { markProjectIngesting } from '../accounts/index.ts';
import { type EntityManager, TransactionPropagation } from '@mikro-orm/postgresql';
import { definitionsFresh, rememberEventDefinitions } from '../event-definitions/index.ts';
import { EVENTS_PER_INSERT, storeEvents, storeRecordingSnapshots } from '../events/index.ts';
import { processesPerson, processPersons, type IngestEvent } from '../persons/index.ts';
import { type IngestionWarningInput, recordWarnings } from './warnings.ts';

const SNAPSHOT_EVENTS = new Set(['$snapshot', '$snapshot_items']);
const RETRYABLE = new Set(['40P01', '40001']); // deadlock, serialization failure
/** Projects whose ingested_event flag this process has set (it is never cleared): one write per project, not per request. */
const projectsIngesting = new Set<number>();
/** transactional() forks `em` for the transaction: a fork of our own before it would be one more per request. */
const NEW_TRANSACTION = { propagation: TransactionPropagation.REQUIRES_NEW };

/**
 * Stores `events` and the request's `warnings` (capture's), with those person processing adds, in a
 * transaction of its own (even when `em` holds one), on a fork of `em` that MikroORM makes for it; or,
 * when that is a single INSERT (oneInsert), as that statement alone.
 */
export async function ingestEvents(
  em: EntityManager,
  projectId: number,
  events: IngestEvent[],
  warnings: readonly IngestionWarningInput[] = [],
): Promise<void> {
  if (events.length === 0) {
    await recordWarnings(em, projectId, warnings);
    return;
  }
  for (let attempt = 1; ; attempt++) {
    const now = new Date();
    let stored: { projectId: number; event: string }[] = [];
    const write = async (tx: EntityManager) => {
      stored = await writeEvents(tx, projectId, events, warnings, now);
    };
    try {
      if (oneInsert(projectId, events, warnings, now)) await write(em);
      else await em.transactional(write, NEW_TRANSACTION);
      projectsIngesting.add(projectId);
      rememberEventDefinitions(stored, now);
      return;
    } catch (error) {
      if (attempt < 4 && RETRYABLE.has((error as { code?: string }).code ?? '')) continue;
      throw error;
    }
  }
}

/**
 * As ingestEvents, inside the caller's transaction `tx` (a quarantine replay claims its events in the
 * same transaction, so that each is stored once): no retry of its own. Call what it returns once the
 * transaction has committed (this process's memory of definitions written and projects ingesting).
 */
export async function ingestEventsInTransaction(
  tx: EntityManager,
  projectId: number,
  events: IngestEvent[],
  warnings: readonly IngestionWarningInput[] = [],
): Promise<() => void> {
  const now = new Date();
  if (events.length === 0) {
    await recordWarnings(tx, projectId, warnings);
    return () => undefined;
  }
  const stored = await writeEvents(tx, projectId, events, warnings, now);
  return () => {
    projectsIngesting.add(projectId);
    rememberEventDefinitions(stored, now);
  };
}

/** Persons, events, recordings and warnings of `events`, on `tx`; returns the definitions written. */
async function writeEvents(
  tx: EntityManager,
  projectId: number,
  events: IngestEvent[],
  warnings: readonly IngestionWarningInput[],
  now: Date,
): Promise<{ projectId: number; event: string }[]> {
  const allWarnings = [...warnings];
  const personIds = await processPersons(tx, projectId, events, allWarnings);
  const rows = events.map((e, i) => ({ ...e, personId: personIds[i] }));
  const recordings = rows.filter((r) => SNAPSHOT_EVENTS.has(r.event));
  const ordinary = rows.filter((r) => !SNAPSHOT_EVENTS.has(r.event));
  const eventRows = ordinary.map((r) => ({
    uuid: r.uuid,
    projectId,
    event: r.event,
    distinctId: r.distinctId,
    personId: r.personId,
    properties: r.properties,
    timestamp: r.timestamp,
  }));
  const stored = await storeEvents(tx, eventRows, now);
  await storeRecordings(tx, projectId, recordings, allWarnings);
  await recordWarnings(tx, projectId, allWarnings);
  if (!projectsIngesting.has(projectId)) await markProjectIngesting(tx, projectId);
  return stored;
}

/**
 * Whether writing `events` is one INSERT and nothing else: personless events (no person to find or
 * change: posthog-js's anonymous traffic) that are no recordings, of names whose definitions are fresh,
 * one INSERT's worth, no warning, for a project already marked as ingesting. One statement is atomic on
 * its own: it needs no BEGIN and COMMIT around it (two round trips and a transaction per request).
 */
function oneInsert(
  projectId: number,
  events: IngestEvent[],
  warnings: readonly IngestionWarningInput[],
  now: Date,
): boolean {
  return (
    events.length <= EVENTS_PER_INSERT &&
    warnings.length === 0 &&
    projectsIngesting.has(projectId) &&
    events.every((e) => !processesPerson(e) && !SNAPSHOT_EVENTS.has(e.event)) &&
    definitionsFresh(
      events.map((e) => ({ projectId, event: e.event })),
      now,
    )
  );
}

/**
 * `$snapshot` events become session recordings (one row per session) and their snapshot data; one
 * without a `$session_id` is not stored, with a warning.
 */
async function storeRecordings(
  em: EntityManager,
  projectId: number,
  rows: (IngestEvent & { personId: string })[],
  warnings: IngestionWarningInput[],
): Promise<void> {
  const hasSession = (r: IngestEvent) =>
    typeof r.properties.$session_id === 'string' && r.properties.$session_id !== '';
  const withSession = rows.filter(hasSession);
  for (const r of rows)
    if (!hasSession(r))
      warnings.push({
        type: 'snapshot_dropped_no_session_id',
        eventUuid: r.uuid,
        distinctId: r.distinctId,
        details: { eventName: r.event, reason: 'a snapshot without a $session_id belongs to no recording; not stored' },
      });
  if (withSession.length === 0) return;
  await storeRecordingSnapshots(
    em,
    projectId,
    withSession.map((r) => ({
      sessionId: String(r.properties.$session_id).slice(0, 200),
      distinctId: r.distinctId,
      personId: r.personId,
      timestamp: r.timestamp,
      data: r.properties.$snapshot_data ?? r.properties.$snapshot_items ?? r.properties,
    })),
  );
}
