// Feature flags as SDK evaluation reads them: a project's active definitions, the person a request
// names, and the hash keys that keep a person's variants when they identify (experience continuity).
import type { EntityManager } from '@mikro-orm/postgresql';
import { type Kysely, sql } from 'kysely';
import { type DB, db, prepared } from '../platform/db/kysely.ts';
import type { FlagFilters } from './evaluate.ts';

const activeFlagsStatement = prepared((kysely: Kysely<DB>, projectId: number) =>
  kysely
    .selectFrom('feature_flag')
    .select((eb) => [
      'id',
      'key',
      'name',
      'version',
      'active',
      'deleted',
      eb.ref('filters').$castTo<FlagFilters & Record<string, unknown>>().as('filters'),
      'ensure_experience_continuity',
      'evaluation_runtime',
    ])
    .where('project_id', '=', projectId)
    .where((eb) => eb.and([eb.ref('active'), eb.not(eb.ref('deleted'))]))
    .orderBy('id'),
);

/** A project's active flags, in id order: one statement (the definitions /flags evaluates). */
export const activeFlags = (em: EntityManager, projectId: number) => activeFlagsStatement(em, projectId);

/** An active flag as stored (see activeFlags). */
export type StoredFlag = Awaited<ReturnType<typeof activeFlags>>[number];

const personByDistinctId = prepared((kysely: Kysely<DB>, projectId: number, distinctId: string) =>
  kysely
    .selectFrom('person_distinct_id as d')
    .innerJoin('person as p', 'p.id', 'd.person_id')
    .select(['p.id', 'p.properties'])
    .where('d.project_id', '=', projectId)
    .where('d.distinct_id', '=', distinctId),
);

/** The person holding `distinctId` (id and stored properties), or null. */
export async function personForFlags(em: EntityManager, projectId: number, distinctId: string) {
  const [person] = await personByDistinctId(em, projectId, distinctId);
  return person ?? null;
}

/** Records `hashKey` for these flags of the person, where none is recorded yet. */
export async function recordHashKeys(
  em: EntityManager,
  projectId: number,
  personId: string,
  flagKeys: string[],
  hashKey: string,
) {
  if (flagKeys.length === 0) return;
  const overrides = flagKeys.map((key) => ({
    project_id: projectId,
    person_id: personId,
    feature_flag_key: key,
    hash_key: hashKey,
  }));
  await db(em)
    .insertInto('feature_flag_hash_key_override')
    .values(overrides)
    .onConflict((oc) => oc.columns(['project_id', 'person_id', 'feature_flag_key']).doNothing())
    .execute();
}

/** The person's recorded hash key per flag key. */
export async function hashKeysOf(em: EntityManager, projectId: number, personId: string) {
  const found = await db(em)
    .selectFrom('feature_flag_hash_key_override')
    .select(['feature_flag_key', 'hash_key'])
    .where('project_id', '=', projectId)
    .where('person_id', '=', personId)
    .execute();
  return new Map(found.map((o) => [o.feature_flag_key, o.hash_key]));
}

/** A merge: the other person's flag hash keys are copied to the target (its own keys win). */
export const copyHashKeyOverrides = prepared((db: Kysely<DB>, targetId: string, otherId: string) =>
  db
    .insertInto('feature_flag_hash_key_override')
    .columns(['project_id', 'person_id', 'feature_flag_key', 'hash_key'])
    .expression((eb) =>
      eb
        .selectFrom('feature_flag_hash_key_override')
        .select(['project_id', eb.val(targetId).as('person_id'), 'feature_flag_key', 'hash_key'])
        .where('person_id', '=', otherId),
    )
    .onConflict((oc) => oc.doNothing()),
);

/** The persons' recorded flag hash keys (an access export hands them over), by person and flag key. */
export function hashKeyOverridesOf(em: EntityManager, projectId: number, personIds: readonly string[]) {
  if (personIds.length === 0) return Promise.resolve([]);
  return db(em)
    .selectFrom('feature_flag_hash_key_override')
    .select([sql<string>`person_id::text`.as('person_id'), 'feature_flag_key', 'hash_key'])
    .where('project_id', '=', projectId)
    .where('person_id', '=', sql<string>`any(${[...personIds]}::bigint[])`)
    .orderBy('person_id')
    .orderBy('feature_flag_key')
    .execute();
}
