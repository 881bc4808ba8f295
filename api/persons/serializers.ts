// Person shapes: the detail record and the seed's list row (both with the integer id), and
// PostHog's actor item (id = uuid) that the analysis views (funnel, lifecycle people) answer.
import { isoTimestamp } from '../../shared/platform/time.ts';
import { orderedDistinctIds } from '../../shared/persons/index.ts';
import type { PersonWithIds } from '../../shared/persons/index.ts';
import { anyJson, dateTime, nullableDateTime, openObject, record, stringArray } from '../http/schemas.ts';

export type { PersonWithIds };

const DISPLAY_NAME_PROPERTIES = ['email', 'name', 'username'];

export function displayName(person: PersonWithIds): string {
  for (const key of DISPLAY_NAME_PROPERTIES) {
    const value = person.properties[key];
    if (value) return String(value);
  }
  return orderedDistinctIds(person.distinct_ids)[0] ?? String(person.id);
}

export function personRecord(person: PersonWithIds) {
  return {
    id: Number(person.id),
    name: displayName(person),
    distinct_ids: orderedDistinctIds(person.distinct_ids),
    properties: person.properties,
    created_at: isoTimestamp(person.created_at),
    uuid: person.uuid,
    last_seen_at: null,
  };
}

/** PostHog's actor shape (id = uuid), as the analysis views list people. */
export function personListItem(person: PersonWithIds) {
  return {
    type: 'person',
    id: person.uuid,
    uuid: person.uuid,
    created_at: isoTimestamp(person.created_at),
    last_seen_at: null,
    properties: person.properties,
    is_identified: person.is_identified,
    name: displayName(person),
    distinct_ids: orderedDistinctIds(person.distinct_ids).slice(0, 1000),
    matched_recordings: [],
    value_at_data_point: null,
  };
}

export const personRecordSchema = record({
  id: { type: 'integer' },
  name: { type: 'string' },
  distinct_ids: stringArray,
  properties: openObject('Person properties, e.g. email'),
  created_at: dateTime,
  uuid: { type: 'string', format: 'uuid' },
  last_seen_at: nullableDateTime,
});

export const personListItemSchema = record({
  type: { const: 'person' },
  id: { type: 'string', format: 'uuid' },
  uuid: { type: 'string', format: 'uuid' },
  created_at: dateTime,
  last_seen_at: nullableDateTime,
  properties: openObject('Person properties, e.g. email'),
  is_identified: { type: 'boolean' },
  name: { type: 'string' },
  distinct_ids: stringArray,
  matched_recordings: { type: 'array', items: openObject() },
  value_at_data_point: anyJson(),
});

/** An item of the persons list and its CSV: the actor shape with the seed's integer `id` (as retrieve). */
export function personListRow(person: PersonWithIds) {
  return { ...personListItem(person), id: Number(person.id) };
}

export const personListRowSchema = {
  ...personListItemSchema,
  properties: { ...personListItemSchema.properties, id: { type: 'integer' } },
};
