// Flag evaluation for SDKs: which flags are on, and which variant, for one person. The person is read
// only when a flag needs it; a project's definitions come prepared (the API process caches them).
import type { EntityManager } from '@mikro-orm/postgresql';
import { evaluateFlag, personPropertyKeys, type FlagEvaluation } from './evaluate.ts';
import { hashKeysOf, personForFlags, recordHashKeys, type StoredFlag } from './store.ts';

export type { StoredFlag };

/** A stored flag with what a request needs to know before evaluating it, worked out once per load. */
export interface PreparedFlag extends StoredFlag {
  /** Person properties its conditions read. */
  personKeys: string[];
}

/** What /flags needs of a project: its id and its active flags, ready to evaluate. */
export interface ProjectFlags {
  projectId: number;
  flags: PreparedFlag[];
}

/** A project's active flags, prepared for evaluation. */
export const prepareFlags = (flags: StoredFlag[]): PreparedFlag[] =>
  flags.map((f) => ({ ...f, personKeys: personPropertyKeys(f.filters) }));

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
 * `entityManager` is called only then (the API forks one per request only when it is read).
 */
export async function evaluateFlagsForPerson(
  entityManager: () => EntityManager,
  projectId: number,
  allFlags: PreparedFlag[],
  request: FlagRequest,
): Promise<FlagEvaluation[]> {
  const onlyKeys = request.onlyKeys;
  const flags = onlyKeys?.length ? allFlags.filter((f) => onlyKeys.includes(f.key)) : allFlags;
  if (flags.length === 0) return [];
  const sent = request.personProperties;
  const needsPerson = flags.some(
    (f) => f.ensure_experience_continuity || f.personKeys.some((k) => !Object.hasOwn(sent, k)),
  );
  const em = needsPerson ? entityManager() : null;
  const person = em ? await personForFlags(em, projectId, request.distinctId) : null;
  const properties = { ...(person?.properties ?? {}), ...request.personProperties };
  let hashKeys = new Map<string, string>();
  const continuity = flags.filter((f) => f.ensure_experience_continuity);
  if (em && person && continuity.length) {
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
