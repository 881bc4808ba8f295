// Flag evaluation for SDKs: which flags are on, and which variant, for one person. A project's
// definitions come from the process's FlagCache (no query once warm); the person is read only when
// a flag needs it.
import type { EntityManager } from '@mikro-orm/postgresql';
import { projectByApiToken } from '../http/project-token.ts';
import { evaluateFlag, personPropertyKeys, type FlagEvaluation } from '../../shared/flags/evaluate.ts';
import type { FlagCache, PreparedFlag, ProjectFlags } from './cache.ts';
import { activeFlags, hashKeysOf, personForFlags, recordHashKeys, type StoredFlag } from '../../shared/flags/store.ts';

export type { StoredFlag };

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
  const person = needsPerson ? await personForFlags(em, projectId, request.distinctId) : null;
  const properties = { ...(person?.properties ?? {}), ...request.personProperties };
  let hashKeys = new Map<string, string>();
  const continuity = flags.filter((f) => f.ensure_experience_continuity);
  if (person && continuity.length) {
    if (request.anonDistinctId) {
      const keys = continuity.map((f) => f.key);
      await recordHashKeys(em, projectId, person.id, keys, request.anonDistinctId);
    }
    hashKeys = await hashKeysOf(em, projectId, person.id);
  }
  return flags.map((flag) => {
    const bucketing = (flag.ensure_experience_continuity && hashKeys.get(flag.key)) || request.distinctId;
    return evaluateFlag(flag, bucketing, properties);
  });
}
