// Feature flags as SDK evaluation reads them: a project's active definitions, the person a request
// names, and the hash keys that keep a person's variants when they identify (experience continuity).
import type { EntityManager } from '@mikro-orm/postgresql';
import { rows, run } from '../db/sql.ts';
import type { FlagDefinition } from './evaluate.ts';

export interface StoredFlag extends FlagDefinition {
  name: string;
  ensure_experience_continuity: boolean;
  evaluation_runtime: string | null;
}

export function activeFlags(em: EntityManager, projectId: number): Promise<StoredFlag[]> {
  return rows<StoredFlag>(
    em,
    `select id, key, name, version, active, deleted, filters, ensure_experience_continuity, evaluation_runtime
       from feature_flag where project_id = ? and active and not deleted order by id`,
    [projectId],
  );
}

/** The person holding `distinctId` (id and stored properties), or null. */
export async function personForFlags(em: EntityManager, projectId: number, distinctId: string) {
  const [person] = await rows<{ id: string; properties: Record<string, unknown> }>(
    em,
    `select p.id, p.properties from person_distinct_id d join person p on p.id = d.person_id
      where d.project_id = ? and d.distinct_id = ?`,
    [projectId, distinctId],
  );
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
  await run(
    em,
    `insert into feature_flag_hash_key_override (project_id, person_id, feature_flag_key, hash_key)
     select ?, ?, k.key, ? from jsonb_array_elements_text(?::jsonb) as k(key)
     on conflict (project_id, person_id, feature_flag_key) do nothing`,
    [projectId, personId, hashKey, JSON.stringify(flagKeys)],
  );
}

/** The person's recorded hash key per flag key. */
export async function hashKeysOf(em: EntityManager, projectId: number, personId: string) {
  const found = await rows<{ feature_flag_key: string; hash_key: string }>(
    em,
    `select feature_flag_key, hash_key from feature_flag_hash_key_override where project_id = ? and person_id = ?`,
    [projectId, personId],
  );
  return new Map(found.map((o) => [o.feature_flag_key, o.hash_key]));
}
