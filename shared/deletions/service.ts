// Deletion requests as users make them: persons deleted at once with their data deletions recorded
// in the same transaction; the same asked as a dry run (what would go, and when, changing nothing);
// a retried request answered with its first answer (Idempotency-Key); a pending request cancelled;
// the persons' distinct ids suppressed (suppress=true: capture drops their later events) and unsuppressed.
import type { EntityManager } from '@mikro-orm/postgresql';
import { createHash } from 'node:crypto';
import { recordActivity, type Actor } from '../platform/activity-log.ts';
import type { Config } from '../platform/config.ts';
import type { EventStore } from '../events/index.ts';
import { canonicalJson } from '../platform/canonical-json.ts';
import { deletePersonRows, type PersonWithIds } from '../persons/index.ts';
import { enqueueDeletions, enqueueWebhookDeliveries, type Queues, requeueDeletions } from '../platform/queues.ts';
import { defaultSchedules, readSchedules } from '../platform/schedules.ts';
import { deletionCrons, nextWindowStart, type DeletionMode } from './schedule.ts';
import { liftSuppressions, recordSuppressions } from './suppression.ts';
import {
  cancelPendingDeletion,
  countPersonData,
  deletionRequestsByIds,
  recordDeletionRequests,
  retryFailedDeletion,
  storeIdempotentAnswer,
  takeIdempotencyKey,
  type DeletionRequest,
  type DeletionRequestView,
  type StoredAnswer,
} from './store.ts';
import { queueDeletionEvents } from './webhooks.ts';
import { personStoresBefore, recordRequestBasis } from './receipts.ts';

export interface DeletionOptions {
  deleteEvents: boolean;
  deleteRecordings: boolean;
  keepPerson: boolean;
  /** When the event deletion runs: the weekly batch (DELETE, bulk_delete) or off-peak (delete_events). */
  eventsMode: DeletionMode;
  /**
   * Capture drops the persons' later events until unsuppressed (held by each person's event deletion
   * request, else its recordings one). Off by default: as in PostHog, a new event makes a new person.
   */
  suppress?: boolean;
}

/**
 * In the caller's transaction: deletes the persons (unless keepPerson), with an activity entry each,
 * and records the requested data deletions; returns the requests as they now stand.
 */
export async function recordPersonDeletions(
  tx: EntityManager,
  actor: Actor,
  persons: PersonWithIds[],
  options: DeletionOptions,
): Promise<{ personsDeleted: number; requests: DeletionRequestView[]; deliveries: string[] }> {
  if (persons.length === 0) return { personsDeleted: 0, requests: [], deliveries: [] };
  let personsDeleted = 0;
  // For the requests' receipts: what the person rows held before they go.
  const personStores =
    options.keepPerson || !(options.deleteEvents || options.deleteRecordings)
      ? new Map()
      : await personStoresBefore(
          tx,
          actor.projectId,
          persons.map((p) => p.id),
        );
  if (!options.keepPerson) {
    const ids = persons.map((p) => p.id);
    personsDeleted = (await deletePersonRows(tx, actor.projectId, ids)).length;
    for (const person of persons) {
      await recordActivity(tx, {
        ...actor,
        scope: 'Person',
        itemId: person.id,
        activity: 'deleted',
        detail: { name: person.uuid },
      });
    }
  }
  const requests: DeletionRequest[] = [];
  for (const person of persons) {
    const base = {
      projectId: actor.projectId,
      key: person.uuid,
      distinctIds: person.distinct_ids,
      createdById: actor.userId,
    };
    if (options.deleteEvents) requests.push({ ...base, type: 'person_events', mode: options.eventsMode });
    if (options.deleteRecordings) requests.push({ ...base, type: 'person_recordings', mode: 'immediate' });
  }
  const ids = await recordDeletionRequests(tx, requests);
  await recordRequestBasis(tx, ids, { userId: actor.userId, keyId: actor.keyId ?? null }, personStores);
  const deliveries = await queueDeletionEvents(tx, actor.projectId, 'queued', ids);
  if (options.suppress) await suppressPersons(tx, actor, persons, await deletionRequestsByIds(tx, ids));
  // Read after the suppressions, which the answer shows.
  return { personsDeleted, requests: await deletionRequestsByIds(tx, ids), deliveries };
}

/** Suppresses each person's distinct ids under its event deletion request (else its recordings one), with an activity entry per request. */
async function suppressPersons(
  tx: EntityManager,
  actor: Actor,
  persons: PersonWithIds[],
  requests: DeletionRequestView[],
): Promise<void> {
  const holder = new Map<string, string>();
  for (const r of [...requests].sort(
    (a, b) => (a.deletion_type === 'person_events' ? -1 : 0) - (b.deletion_type === 'person_events' ? -1 : 0),
  ))
    if (!holder.has(r.person_uuid)) holder.set(r.person_uuid, r.id);
  const targets = persons
    .filter((p) => holder.has(p.uuid))
    .map((p) => ({ requestId: holder.get(p.uuid)!, distinctIds: p.distinct_ids, person: p.uuid }));
  const made = await recordSuppressions(tx, actor.projectId, targets);
  for (const t of targets) {
    const suppressed = made.get(t.requestId) ?? [];
    if (suppressed.length === 0) continue;
    await recordActivity(tx, {
      ...actor,
      scope: 'DeletionRequest',
      itemId: t.requestId,
      activity: 'suppressed',
      detail: {
        name: t.person,
        changes: [
          { type: 'DeletionRequest', action: 'changed', field: 'suppression', before: null, after: suppressed },
        ],
      },
    });
  }
}

/**
 * After the commit: recordings go now; event deletions wait for their scheduled window; the
 * deletion.queued webhook deliveries go to their queue. If Redis is down the rows stay pending and the
 * worker's reconcilers enqueue them.
 */
export async function enqueueAfterDeletions(
  queues: Pick<Queues, 'deletions' | 'webhooks'>,
  done: { requests: DeletionRequestView[]; deliveries: string[] },
): Promise<void> {
  await enqueueDeletions(
    queues.deletions,
    done.requests.filter((r) => r.mode === 'immediate').map((r) => r.id),
  );
  await enqueueWebhookDeliveries(queues.webhooks, done.deliveries);
}

// ---- Idempotency keys ----------------------------------------------------------------------------

/** How long a key's first answer is kept; a longer key is refused. */
export const IDEMPOTENCY_KEY_HOURS = 24;
export const IDEMPOTENCY_KEY_MAX_LENGTH = 255;

export interface IdempotencyKey {
  /** The user who sent it: keys are per project and user, so another user's equal key is another key. */
  userId: number;
  key: string;
  /** sha256 of the request: the same key with another request is refused. */
  fingerprint: string;
}

/** The user's key with the fingerprint of `request` (anything JSON; object key order does not matter). */
export const idempotencyKey = (userId: number, key: string, request: unknown): IdempotencyKey => ({
  userId,
  key,
  fingerprint: createHash('sha256').update(canonicalJson(request)).digest('hex'),
});

/**
 * Runs `work` in a transaction and answers what it answers; with a key, the key is taken in the same
 * transaction and keeps the answer, so a retry (even a concurrent one) answers the first answer and
 * does nothing (`replayed`); the key with another request answers 'key_reused'. If `work` throws,
 * nothing is kept and a retry runs again. `afterCommit` runs only for the request that did the work.
 */
export async function answerOnce(
  em: EntityManager,
  projectId: number,
  key: IdempotencyKey | null,
  work: (tx: EntityManager) => Promise<{ answer: StoredAnswer; afterCommit?: () => Promise<unknown> }>,
): Promise<(StoredAnswer & { replayed: boolean }) | 'key_reused'> {
  let afterCommit: (() => Promise<unknown>) | undefined;
  const result = await em.fork().transactional(async (tx) => {
    const txEm = tx;
    if (key) {
      const earlier = await takeIdempotencyKey(txEm, projectId, key, IDEMPOTENCY_KEY_HOURS);
      if (earlier) {
        if (earlier.fingerprint !== key.fingerprint) return 'key_reused' as const;
        return { status: earlier.status, body: earlier.body, replayed: true };
      }
    }
    const done = await work(txEm);
    afterCommit = done.afterCommit;
    if (key) await storeIdempotentAnswer(txEm, projectId, key, done.answer);
    return { ...done.answer, replayed: false };
  });
  if (afterCommit) await afterCommit();
  return result;
}

// ---- Dry runs ----------------------------------------------------------------------------------

export interface DeletionWindow {
  mode: DeletionMode;
  /** When it would start: the window's next opening (immediate: now). */
  starts_at: string;
}

export interface DeletionDryRun {
  dry_run: true;
  persons_found: number;
  /** What would be deleted now, per store. */
  would_delete: { persons: number; distinct_ids: number; events: number; recordings: number };
  /** When each data deletion would run (null: not asked). Persons go at once. */
  windows: { events: DeletionWindow | null; recordings: DeletionWindow | null };
}

/** What deleting `persons` with `options` would delete now, and when; reads only. */
export async function previewPersonDeletions(
  em: EntityManager,
  events: EventStore,
  config: Pick<Config, 'deletion' | 'schedules'>,
  projectId: number,
  persons: PersonWithIds[],
  options: DeletionOptions,
): Promise<DeletionDryRun> {
  const target = { personIds: persons.map((p) => p.uuid), distinctIds: persons.flatMap((p) => p.distinct_ids) };
  const found = persons.length > 0;
  const data = await countPersonData(em, events, projectId, target, {
    events: options.deleteEvents && found,
    recordings: options.deleteRecordings && found,
  });
  const now = new Date();
  const windowOf = async (mode: DeletionMode): Promise<DeletionWindow> => {
    if (mode === 'immediate') return { mode, starts_at: now.toISOString() };
    const crons = deletionCrons(await readSchedules(em, defaultSchedules(config)));
    return { mode, starts_at: nextWindowStart(crons[mode], now).toISOString() };
  };
  return {
    dry_run: true,
    persons_found: persons.length,
    would_delete: {
      persons: options.keepPerson ? 0 : persons.length,
      distinct_ids: options.keepPerson ? 0 : target.distinctIds.length,
      ...data,
    },
    windows: {
      events: options.deleteEvents && found ? await windowOf(options.eventsMode) : null,
      recordings: options.deleteRecordings && found ? await windowOf('immediate') : null,
    },
  };
}

// ---- Cancelling ----------------------------------------------------------------------------------

/**
 * Cancels a pending request, with an activity entry, in one transaction: of the actor's project (an
 * operator's cancel from the command line: of any project, `projectId` null, logged as system
 * activity). 'cancelled' (now, or already before: the same row), 'too_late' (a worker claimed it, or
 * it is done or failed), or undefined (no such request in the project).
 */
export async function cancelDeletion(
  em: EntityManager,
  actor: { projectId: number | null; organizationId?: string | null; userId: number | null },
  id: string,
  /** Where the deliveries of its deletion.cancelled event go; null (the CLI): the worker's reconciler hands them over. */
  queues: Pick<Queues, 'webhooks'> | null,
): Promise<{ outcome: 'cancelled' | 'too_late'; request: DeletionRequestView } | undefined> {
  const done = await em.fork().transactional(async (tx) => {
    const txEm = tx;
    const result = await cancelPendingDeletion(txEm, actor.projectId, id);
    if (!result) return undefined;
    const { request } = result;
    let deliveries: string[] = [];
    if (result.cancelled) {
      deliveries = await queueDeletionEvents(txEm, request.project_id, 'cancelled', [request.id]);
      await recordActivity(txEm, {
        ...actor,
        projectId: request.project_id,
        scope: 'DeletionRequest',
        itemId: request.id,
        activity: 'cancelled',
        detail: {
          name: request.person_uuid,
          type: request.deletion_type,
          changes: [
            { type: 'DeletionRequest', action: 'changed', field: 'status', before: 'pending', after: 'cancelled' },
          ],
        },
      });
    }
    return {
      outcome: request.status === 'cancelled' ? ('cancelled' as const) : ('too_late' as const),
      request,
      deliveries,
    };
  });
  if (!done) return undefined;
  if (queues) await enqueueWebhookDeliveries(queues.webhooks, done.deliveries);
  return { outcome: done.outcome, request: done.request };
}

// ---- Unsuppressing -------------------------------------------------------------------------------

/**
 * Lifts a request's suppression, with an activity entry, in one transaction: capture stores its
 * distinct ids' events again (a new event makes a new person). 'not_found' (no such request in the
 * project), 'not_suppressed' (it never suppressed anything); lifting again answers the same request
 * and logs nothing.
 */
export async function unsuppressDeletion(
  em: EntityManager,
  actor: Actor,
  id: string,
): Promise<DeletionRequestView | 'not_found' | 'not_suppressed'> {
  return em.fork().transactional(async (tx) => {
    const [request] = await deletionRequestsByIds(tx, [id]);
    if (!request || request.project_id !== actor.projectId) return 'not_found';
    const { lifted, hadAny } = await liftSuppressions(tx, id);
    if (!hadAny) return 'not_suppressed';
    if (lifted.length > 0)
      await recordActivity(tx, {
        ...actor,
        scope: 'DeletionRequest',
        itemId: id,
        activity: 'unsuppressed',
        detail: {
          name: request.person_uuid,
          changes: [{ type: 'DeletionRequest', action: 'changed', field: 'suppression', before: lifted, after: null }],
        },
      });
    const [after] = await deletionRequestsByIds(tx, [id]);
    return after;
  });
}

/**
 * An operator's retry of a failed request, from the API or the CLI: due at once, then handed to the worker
 * through `queue` when Redis answers (otherwise the worker's reconciler gives it a job within
 * DELETION_RECONCILE_SECONDS). Answers the request and whether it was handed over, or why not.
 */
export async function retryDeletion(
  em: EntityManager,
  projectId: number | null,
  id: string,
  queue: Queues['deletions'],
): Promise<{ request: DeletionRequestView; handedToWorker: boolean } | 'not_found' | 'not_failed'> {
  const request = await retryFailedDeletion(em, projectId, id);
  if (request === 'not_found' || request === 'not_failed') return request;
  const handedToWorker = await requeueDeletions(queue, [id]).then(
    () => true,
    () => false,
  );
  return { request, handedToWorker };
}
