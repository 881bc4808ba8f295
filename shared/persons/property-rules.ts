// The person-property rules, the one implementation serving capture ($set/$set_once/$unset on
// events) and the person endpoints (PATCH, update_property, delete_property).
import type { EntityManager } from '@mikro-orm/postgresql';
import type { Selectable } from 'kysely';
import { type DB, db } from '../platform/db/kysely.ts';

export type Properties = Record<string, unknown>;

export interface PropertyUpdate {
  set?: Properties;
  setOnce?: Properties;
  /** Keys to remove. */
  unset?: string[];
}

/**
 * PostHog's order: `$set_once` writes only keys the person does not have (a stored null counts as
 * present), then `$set` writes every key, then `$unset` removes keys. Returns the new properties and
 * whether anything changed.
 */
export function applyPropertyUpdate(
  current: Properties,
  update: PropertyUpdate,
): { properties: Properties; changed: boolean } {
  const properties: Properties = { ...current };
  let changed = false;
  // defineProperty, not assignment: a "__proto__" key (JSON.parse makes it an own key) is data here.
  const put = (key: string, value: unknown) =>
    Object.defineProperty(properties, key, { value, writable: true, enumerable: true, configurable: true });
  for (const [key, value] of Object.entries(update.setOnce ?? {})) {
    if (!Object.hasOwn(properties, key)) {
      put(key, value);
      changed = true;
    }
  }
  for (const [key, value] of Object.entries(update.set ?? {})) {
    if (!Object.hasOwn(properties, key) || !sameJson(properties[key], value)) {
      put(key, value);
      changed = true;
    }
  }
  for (const key of update.unset ?? []) {
    if (Object.hasOwn(properties, key)) {
      delete properties[key];
      changed = true;
    }
  }
  return { properties, changed };
}

function sameJson(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  return JSON.stringify(a) === JSON.stringify(b);
}

/** `$unset` may be an array of keys or an object whose keys are removed. */
export function unsetKeys(value: unknown): string[] {
  if (Array.isArray(value)) return value.filter((k): k is string => typeof k === 'string');
  if (value && typeof value === 'object') return Object.keys(value);
  if (typeof value === 'string') return [value];
  return [];
}

export type PersonRow = Selectable<DB['person']>;

/**
 * Applies an update to a stored person under a row lock, so concurrent updates from several
 * processes never lose each other's keys. Must run inside a transaction (`em` from em.transactional).
 * Returns the person after the update, or null if it does not exist in the project.
 */
export async function updateStoredPersonProperties(
  em: EntityManager,
  projectId: number,
  personId: string | number,
  update: PropertyUpdate,
): Promise<PersonRow | null> {
  const person = await db(em)
    .selectFrom('person')
    .selectAll()
    .where('project_id', '=', projectId)
    .where('id', '=', String(personId))
    .forUpdate()
    .executeTakeFirst();
  if (!person) return null;
  const { properties, changed } = applyPropertyUpdate(person.properties, update);
  if (!changed) return person;
  return db(em)
    .updateTable('person')
    .set((eb) => ({ properties, version: eb('version', '+', '1') }))
    .where('id', '=', person.id)
    .returningAll()
    .executeTakeFirstOrThrow();
}
