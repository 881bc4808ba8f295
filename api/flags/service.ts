// Flag evaluation for SDKs: which flags are on, and which variant, for one person. A project's
// definitions come from the process's FlagCache (no query once warm); the person is read only when
// a flag needs it.
import type { EntityManager } from '@mikro-orm/postgresql';
import { projectByApiToken } from '../http/project-token.ts';
import {
  evaluateFlag,
  personPropertyKeys,
  type FlagDefinition,
  type FlagEvaluation,
} from '../../shared/flags/evaluate.ts';
import type { FlagCache, ProjectFlags } from './cache.ts';
import { rows } from '../../shared/db/sql.ts';

export interface StoredFlag extends FlagDefinition {
  name: string;
  ensure_experience_continuity: boolean;
  evaluation_runtime: string | null;
}

/** A stored flag with what a request needs to know before evaluating it, worked out once per load. */
export interface PreparedFlag extends StoredFlag {
  /** Person properties its conditions read. */
  personKeys: string[];
}

export async function activeFlags(em: EntityManager, projectId: number): Promise<StoredFlag[]> {
  return rows<StoredFlag>(
    em,
    `select id, key, name, version, active, deleted, filters, ensure_experience_continuity, evaluation_runtime
       from feature_flag where project_id = ? and active and not deleted order by id`,
    [projectId],
  );
}

/**
 * The project behind an SDK's project token and its active flags: from `cache` when it may serve,
 * else two queries. An unknown token is a 401 (never cached: a new project may get it).
 */
export async function projectFlags(
  em: EntityManager,
  cache: FlagCache | null | undefined,
  token: unknown,
): Promise<ProjectFlags> {
  const load = async (): Promise<ProjectFlags> => {
    const project = await projectByApiToken(em, token);
    const flags = await activeFlags(em, project.id);
    return { projectId: project.id, flags: flags.map((f) => ({ ...f, personKeys: personPropertyKeys(f.filters) })) };
  };
  // The cache key is the token as projectByApiToken looks it up; anything else it refuses.
  if (!cache || typeof token !== 'string') return load();
  return cache.get(token.trim(), load);
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
 * Evaluates `flags` (a project's active flags) for the person behind `distinctId`. The person is
 * read only when a flag's conditions need a property the SDK did not send, or a flag with experience
 * continuity buckets by the hash key stored for the person (first set from `$anon_distinct_id`).
 */
export async function evaluateFlagsForPerson(
  em: EntityManager,
  projectId: number,
  allFlags: PreparedFlag[],
  request: FlagRequest,
): Promise<FlagEvaluation[]> {
  const flags = request.onlyKeys?.length ? allFlags.filter((f) => request.onlyKeys!.includes(f.key)) : allFlags;
  if (flags.length === 0) return [];
  const sent = request.personProperties;
  const needsPerson = flags.some(
    (f) => f.ensure_experience_continuity || f.personKeys.some((k) => !Object.hasOwn(sent, k)),
  );
  const [person] = needsPerson
    ? await rows<{ id: string; properties: Record<string, unknown> }>(
        em,
        `select p.id, p.properties from person_distinct_id d join person p on p.id = d.person_id
          where d.project_id = ? and d.distinct_id = ?`,
        [projectId, request.distinctId],
      )
    : [];
  const properties = { ...(person?.properties ?? {}), ...request.personProperties };
  const hashKeys = new Map<string, string>();
  const continuity = flags.filter((f) => f.ensure_experience_continuity);
  if (person && continuity.length) {
    if (request.anonDistinctId) {
      await rows(
        em,
        `insert into feature_flag_hash_key_override (project_id, person_id, feature_flag_key, hash_key)
         select ?, ?, k.key, ? from jsonb_array_elements_text(?::jsonb) as k(key)
         on conflict (project_id, person_id, feature_flag_key) do nothing`,
        [projectId, person.id, request.anonDistinctId, JSON.stringify(continuity.map((f) => f.key))],
      );
    }
    const overrides = await rows<{ feature_flag_key: string; hash_key: string }>(
      em,
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
