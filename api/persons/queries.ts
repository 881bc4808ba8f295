// The HTTP side of reading persons: `:id` and the list's query parameters turned into store calls, with
// their 400/404 answers. The SQL is in shared/persons/store.ts; the list is shared by JSON, CSV and
// the analysis endpoints (funnel, lifecycle) that return persons.
import { isBigintId } from '../../shared/platform/ids.ts';
import type { EntityManager } from '@mikro-orm/postgresql';
import { isUuid } from '../../shared/platform/db/sql.ts';
import type { EventStore } from '../../shared/events/index.ts';
import { FilterError, type SqlFragment } from '../../shared/platform/db/property-filters.ts';
import * as store from '../../shared/persons/index.ts';
import { notFound, validationError } from '../http/errors.ts';
import type { PersonWithIds } from './serializers.ts';

/** The path parameter `:id` of a person, for the OpenAPI document: its numeric id or its uuid. */
export const PERSON_ID = {
  id: {
    anyOf: [{ type: 'integer' }, { type: 'string', format: 'uuid' }],
    description: "The person's id, or its uuid",
  },
};

/** The person `:id` names (numeric id or uuid) in the project; 400 for anything else, 404 if absent. */
export async function findPerson(em: EntityManager, projectId: number, idParam: string): Promise<PersonWithIds> {
  let ref: { id: string } | { uuid: string };
  if (isBigintId(idParam)) ref = { id: idParam };
  else if (isUuid(idParam)) ref = { uuid: idParam };
  else
    throw validationError(
      'The ID provided does not look like a personID. If you are using a distinctId, please use /persons?distinct_id=<id> instead.',
    );
  const person = await store.findPerson(em, projectId, ref);
  if (!person) throw notFound();
  return person;
}

export interface PersonListQuery {
  distinct_id?: string;
  email?: string;
  search?: string;
  properties?: string;
}

/** The WHERE clause of a person list (alias `p`), from the list's query parameters; 400 for a bad filter. */
export async function personListFilter(
  em: EntityManager,
  projectId: number,
  query: PersonListQuery,
  events?: EventStore,
): Promise<SqlFragment> {
  let properties: unknown;
  if (query.properties !== undefined && query.properties !== '') {
    try {
      properties = JSON.parse(query.properties);
    } catch {
      throw validationError('Properties filter must be a JSON array of property filters.', 'properties');
    }
  }
  try {
    return await store.personListFilter(em, projectId, { ...query, properties }, events);
  } catch (error) {
    if (error instanceof FilterError) throw validationError(error.message, 'properties');
    throw error;
  }
}
