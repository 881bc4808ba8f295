// Changing and deleting persons. Property changes go through the shared person-property rules,
// record the equivalent event and an activity entry, all in one transaction. Deletions remove the
// person at once and record deletion requests (events, recordings) in the same transaction.
import type { EntityManager } from '@mikro-orm/postgresql';
import { randomUUID } from 'node:crypto';
import type { Queue } from 'bullmq';
import { recordActivity, type ActivityChange, type Actor } from '../../shared/activity-log.ts';
import type { DeletionMode } from '../../shared/deletions/schedule.ts';
import {
  deletionRequestsByIds,
  recordDeletionRequests,
  type DeletionRequest,
  type DeletionRequestView,
} from '../../shared/deletions/store.ts';
import { personStoresBefore, recordRequestBasis } from '../../shared/deletions/receipts.ts';
import { storeEvents } from '../../shared/events/store.ts';
import { deletePersonRows } from '../../shared/persons/store.ts';
import { updateStoredPersonProperties, type PropertyUpdate } from '../../shared/persons/property-rules.ts';
import { enqueueDeletions } from '../../shared/queues.ts';
import { findPerson } from './queries.ts';
import { orderedDistinctIds, type PersonWithIds } from './serializers.ts';

/**
 * Applies `update` as capturing `event` would, synchronously, and returns the person after it.
 * The event is recorded under the person's first distinct id, as PostHog does.
 */
export async function changePersonProperties(
  em: EntityManager,
  actor: Actor,
  person: PersonWithIds,
  update: PropertyUpdate,
  event: { name: '$set' | '$delete_person_property'; properties: Record<string, unknown> },
  activity: { name: string; itemName: string | null; changes: ActivityChange[] },
): Promise<PersonWithIds> {
  await em.fork().transactional(async (tx) => {
    const txEm = tx as EntityManager;
    await updateStoredPersonProperties(txEm, actor.projectId, person.id, update);
    const distinctId = orderedDistinctIds(person.distinct_ids)[0];
    if (distinctId !== undefined) {
      await storeEvents(txEm, [
        {
          uuid: randomUUID(),
          projectId: actor.projectId,
          event: event.name,
          distinctId,
          personId: person.uuid,
          properties: event.properties,
          timestamp: new Date(),
        },
      ]);
    }
    await recordActivity(txEm, {
      ...actor,
      scope: 'Person',
      itemId: person.id,
      activity: activity.name,
      detail: { name: activity.itemName, changes: activity.changes },
    });
  });
  return findPerson(em, actor.projectId, person.id);
}

export interface DeletionOptions {
  deleteEvents: boolean;
  deleteRecordings: boolean;
  keepPerson: boolean;
  /** When the event deletion runs: the weekly batch (DELETE, bulk_delete) or off-peak (delete_events). */
  eventsMode: DeletionMode;
}

/** Deletes persons (unless keepPerson) and records the requested data deletions; returns the requests. */
export async function deletePersons(
  em: EntityManager,
  deletionQueue: Queue,
  actor: Actor,
  persons: PersonWithIds[],
  options: DeletionOptions,
): Promise<{ personsDeleted: number; requests: DeletionRequestView[] }> {
  if (persons.length === 0) return { personsDeleted: 0, requests: [] };
  let requestIds: string[] = [];
  let personsDeleted = 0;
  await em.fork().transactional(async (tx) => {
    const txEm = tx as EntityManager;
    // For the requests' receipts: what the person rows held before they go.
    const personStores =
      options.keepPerson || !(options.deleteEvents || options.deleteRecordings)
        ? new Map()
        : await personStoresBefore(
            txEm,
            actor.projectId,
            persons.map((p) => p.id),
          );
    if (!options.keepPerson) {
      personsDeleted = (
        await deletePersonRows(
          txEm,
          actor.projectId,
          persons.map((p) => p.id),
        )
      ).length;
      for (const person of persons) {
        await recordActivity(txEm, {
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
    requestIds = await recordDeletionRequests(txEm, requests);
    await recordRequestBasis(txEm, requestIds, { userId: actor.userId, keyId: actor.keyId ?? null }, personStores);
  });
  const requests = await deletionRequestsByIds(em, requestIds);
  // Recordings go now; event deletions wait for their scheduled window. If Redis is down the rows
  // stay pending and the worker's reconciler enqueues them.
  await enqueueDeletions(
    deletionQueue,
    requests.filter((r) => r.mode === 'immediate').map((r) => r.id),
  );
  return { personsDeleted, requests };
}
