// Changing persons: the rules and composition behind the person endpoints. Property changes go through
// the shared person-property rules, record the equivalent event and an activity entry, all in one
// transaction; a split moves distinct ids to persons of their own, with its activity entry. (Deleting
// persons and their data: shared/deletions/service.ts.)
import type { EntityManager } from '@mikro-orm/postgresql';
import { randomUUID } from 'node:crypto';
import { type ActivityChange, type Actor, recordActivity } from '../platform/activity-log.ts';
import { storeEvents } from '../events/index.ts';
import { type PropertyUpdate, updateStoredPersonProperties } from './property-rules.ts';
import { findPerson, type PersonWithIds, splitDistinctIds } from './store.ts';

// Anonymous ids look like UUIDs / posthog-js ids: five dash-separated lowercase alphanumeric groups.
const ANONYMOUS_ID = /^([a-z0-9]+-){4}([a-z0-9]+)$/;

/** Non-anonymous distinct ids first, otherwise in insertion order (stable). */
export function orderedDistinctIds(ids: string[]): string[] {
  return [...ids].sort((a, b) => Number(ANONYMOUS_ID.test(a)) - Number(ANONYMOUS_ID.test(b)));
}

/**
 * Applies `update` as capturing `event` would, synchronously, and returns the person after it (null if
 * it is gone meanwhile). The event is recorded under the person's first distinct id, as PostHog does.
 */
export async function changePersonProperties(
  em: EntityManager,
  actor: Actor,
  person: PersonWithIds,
  update: PropertyUpdate,
  event: { name: '$set' | '$delete_person_property'; properties: Record<string, unknown> },
  activity: { name: string; itemName: string | null; changes: ActivityChange[] },
): Promise<PersonWithIds | null> {
  await em.fork().transactional(async (tx) => {
    await updateStoredPersonProperties(tx, actor.projectId, person.id, update);
    const distinctId = orderedDistinctIds(person.distinct_ids)[0];
    if (distinctId !== undefined) {
      await storeEvents(tx, [
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
    await recordActivity(tx, {
      ...actor,
      scope: 'Person',
      itemId: person.id,
      activity: activity.name,
      detail: { name: activity.itemName, changes: activity.changes },
    });
  });
  return findPerson(em, actor.projectId, { id: person.id });
}

/**
 * Moves `toSplit` (distinct ids of `person`) to persons of their own, and records the split in the
 * activity log, in one transaction.
 */
export async function splitPerson(em: EntityManager, actor: Actor, person: PersonWithIds, toSplit: string[]) {
  await em.fork().transactional(async (tx) => {
    await splitDistinctIds(tx, actor.projectId, person.id, toSplit);
    await recordActivity(tx, {
      ...actor,
      scope: 'Person',
      itemId: person.id,
      activity: 'split_person',
      detail: {
        name: person.uuid,
        changes: [
          {
            type: 'Person',
            action: 'split',
            field: null,
            before: null,
            after: { distinct_ids: orderedDistinctIds(person.distinct_ids), distinct_ids_to_split: toSplit },
          },
        ],
      },
    });
  });
}
