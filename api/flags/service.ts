// Flag evaluation for SDKs: which flags are on, and which variant, for one person.
import type { EntityManager } from '@mikro-orm/postgresql';
import { evaluateFlag, type FlagDefinition, type FlagEvaluation } from '../../shared/flags/evaluate.ts';

export interface StoredFlag extends FlagDefinition {
  name: string;
  ensure_experience_continuity: boolean;
  evaluation_runtime: string | null;
}

export async function activeFlags(em: EntityManager, projectId: number): Promise<StoredFlag[]> {
  return em.getConnection().execute<StoredFlag[]>(
    `select id, key, name, version, active, deleted, filters, ensure_experience_continuity, evaluation_runtime
       from feature_flag where project_id = ? and active and not deleted order by id`,
    [projectId],
  );
}

export interface FlagRequest {
  distinctId: string;
  /** Properties the SDK sent; they override stored ones. */
  personProperties: Record<string, unknown>;
  /** The anonymous id a person had before identifying (posthog-js sends it). */
  anonDistinctId?: string;
  /** Evaluate only these keys (SDKs ask for one flag at a time). */
  onlyKeys?: string[];
}

/**
 * Evaluates every active flag for the person behind `distinctId`. Flags with experience continuity
 * bucket by the hash key stored for the person (first set from `$anon_distinct_id`).
 */
export async function evaluateFlagsForPerson(em: EntityManager, projectId: number, request: FlagRequest): Promise<FlagEvaluation[]> {
  let flags = await activeFlags(em, projectId);
  if (request.onlyKeys?.length) flags = flags.filter((f) => request.onlyKeys!.includes(f.key));
  if (flags.length === 0) return [];
  const conn = em.getConnection();
  const [person] = await conn.execute<{ id: string; properties: Record<string, unknown> }[]>(
    `select p.id, p.properties from person_distinct_id d join person p on p.id = d.person_id
      where d.project_id = ? and d.distinct_id = ?`,
    [projectId, request.distinctId],
  );
  const properties = { ...(person?.properties ?? {}), ...request.personProperties };
  const hashKeys = new Map<string, string>();
  const continuity = flags.filter((f) => f.ensure_experience_continuity);
  if (person && continuity.length) {
    if (request.anonDistinctId) {
      await conn.execute(
        `insert into feature_flag_hash_key_override (project_id, person_id, feature_flag_key, hash_key)
         select ?, ?, k.key, ? from jsonb_array_elements_text(?::jsonb) as k(key)
         on conflict (project_id, person_id, feature_flag_key) do nothing`,
        [projectId, person.id, request.anonDistinctId, JSON.stringify(continuity.map((f) => f.key))],
      );
    }
    const overrides = await conn.execute<{ feature_flag_key: string; hash_key: string }[]>(
      `select feature_flag_key, hash_key from feature_flag_hash_key_override where project_id = ? and person_id = ?`,
      [projectId, person.id],
    );
    for (const o of overrides) hashKeys.set(o.feature_flag_key, o.hash_key);
  }
  return flags.map((flag) => {
    const bucketing = (flag.ensure_experience_continuity && hashKeys.get(flag.key)) || request.distinctId;
    return evaluateFlag(flag, bucketing, properties);
  });
}
