// Changing persons. Property changes go through the shared person-property rules, record the
// equivalent event and an activity entry, all in one transaction. (Deleting persons and their data:
// shared/deletions/service.ts.)
import type { EntityManager } from '@mikro-orm/postgresql';
import { randomUUID } from 'node:crypto';
import { recordActivity, type ActivityChange, type Actor } from '../../shared/activity-log.ts';
import { storeEvents } from '../../shared/events/store.ts';
import { updateStoredPersonProperties, type PropertyUpdate } from '../../shared/persons/property-rules.ts';
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
    const txEm = tx;
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
