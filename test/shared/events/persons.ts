// Persons for the event-store tests, straight into PostgreSQL (the stores read persons from there).
import type { EntityManager } from '@mikro-orm/postgresql';
import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import { db } from '../../../shared/platform/db/kysely.ts';

/**
 * A person with these distinct ids, in this order; created now (a later person lists first), or
 * `daysAgo` days ago.
 */
export async function insertPerson(
  em: EntityManager,
  projectId: number,
  distinctIds: string[],
  daysAgo = 0,
): Promise<{ id: string; uuid: string }> {
  const uuid = randomUUID();
  const { id } = await db(em)
    .insertInto('person')
    .values({ uuid, project_id: projectId, created_at: sql`clock_timestamp() - make_interval(days => ${daysAgo})` })
    .returning(sql<string>`id::text`.as('id'))
    .executeTakeFirstOrThrow();
  if (distinctIds.length > 0)
    await db(em)
      .insertInto('person_distinct_id')
      .values(distinctIds.map((distinctId) => ({ project_id: projectId, person_id: id, distinct_id: distinctId })))
      .execute();
  return { id, uuid };
}
