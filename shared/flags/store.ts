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
      // Sticky: an experiment on it allocates adaptively (parameters.allocation), so its rollout
      // percentages move and each bucketing value keeps the variant it was first served.
      eb
        .exists(
          eb
            .selectFrom('experiment as x')
            .select(sql<number>`1`.as('one'))
            .whereRef('x.feature_flag_id', '=', 'feature_flag.id')
            .whereRef('x.project_id', '=', 'feature_flag.project_id') // (the project's experiments, by their index)
            .where('x.deleted', '=', false)
            .where(sql<boolean>`jsonb_typeof(x.parameters->'allocation') = 'object'`),
        )
        .as('sticky'),
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

const stickyVariantOf = prepared((kysely: Kysely<DB>, flagId: number, value: string) =>
  kysely
    .selectFrom('feature_flag_sticky_variant')
    .select(['feature_flag_id', 'variant'])
    .where('feature_flag_id', '=', flagId)
    .where('bucketing_value', '=', value),
);

/** The variants stored for these (flag, bucketing value) pairs, by flag id. One statement. */
export async function stickyVariants(em: EntityManager, pairs: { flagId: number; value: string }[]) {
  if (pairs.length === 0) return new Map<number, string>();
  if (pairs.length === 1) {
    // (One bandit flag, the usual case: a statement built once.)
    const found = await stickyVariantOf(em, pairs[0].flagId, pairs[0].value);
    return new Map(found.map((r) => [r.feature_flag_id, r.variant]));
  }
  const found = await db(em)
    .selectFrom('feature_flag_sticky_variant')
    .select(['feature_flag_id', 'bucketing_value', 'variant'])
    .where((eb) =>
      eb.or(pairs.map((p) => eb.and([eb('feature_flag_id', '=', p.flagId), eb('bucketing_value', '=', p.value)]))),
    )
    .execute();
  const wanted = new Map(pairs.map((p) => [p.flagId, p.value]));
  return new Map(
    found.filter((r) => wanted.get(r.feature_flag_id) === r.bucketing_value).map((r) => [r.feature_flag_id, r.variant]),
  );
}

/**
 * Records each pair's first variant, where none is recorded yet; returns the variants stored for
 * the pairs afterwards (another request's, if it recorded first).
 */
export async function recordStickyVariants(
  em: EntityManager,
  projectId: number,
  rows: { flagId: number; value: string; variant: string }[],
) {
  if (rows.length === 0) return new Map<number, string>();
  const inserted = await db(em)
    .insertInto('feature_flag_sticky_variant')
    .values(
      rows.map((r) => ({
        project_id: projectId,
        feature_flag_id: r.flagId,
        bucketing_value: r.value,
        variant: r.variant,
      })),
    )
    .onConflict((oc) => oc.columns(['feature_flag_id', 'bucketing_value']).doNothing())
    .returning(['feature_flag_id', 'variant'])
    .execute();
  const stored = new Map(inserted.map((r) => [r.feature_flag_id, r.variant]));
  const raced = rows.filter((r) => !stored.has(r.flagId));
  for (const [flagId, variant] of await stickyVariants(
    em,
    raced.map((r) => ({ flagId: r.flagId, value: r.value })),
  ))
    stored.set(flagId, variant);
  return stored;
}
