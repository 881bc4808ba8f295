// Flag evaluation for SDKs: which flags are on, and which variant, for one person. The person is read
// only when a flag needs it; a project's definitions come prepared (the API process caches them).
import type { EntityManager } from '@mikro-orm/postgresql';
import { evaluateFlag, personPropertyKeys, type FlagEvaluation } from './evaluate.ts';
import {
  hashKeysOf,
  personForFlags,
  recordHashKeys,
  recordStickyVariants,
  type StoredFlag,
  stickyVariants,
} from './store.ts';

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
  const bucketingOf = (flag: PreparedFlag) =>
    (flag.ensure_experience_continuity && hashKeys.get(flag.key)) || request.distinctId;
  // Sticky flags (an adaptive experiment moves their rollout): the variant first served, one read.
  const sticky = flags.filter((f) => f.sticky);
  if (sticky.length === 0) return flags.map((flag) => evaluateFlag(flag, bucketingOf(flag), properties));
  const stickyEm = em ?? entityManager();
  const pairs = (list: PreparedFlag[]) => list.map((f) => ({ flagId: f.id, value: bucketingOf(f) }));
  const assigned = await stickyVariants(stickyEm, pairs(sticky));
  const evaluate = (flag: PreparedFlag) =>
    evaluateFlag(flag, bucketingOf(flag), properties, flag.sticky ? assigned.get(flag.id) : undefined);
  const evaluations = flags.map(evaluate);
  // First served now (by the hash, not a condition's own variant or the holdout): recorded.
  const fresh = flags.flatMap((flag, i) => {
    const e = evaluations[i];
    if (!flag.sticky || assigned.has(flag.id) || !hashedVariant(flag, e)) return [];
    return [{ flagId: flag.id, value: bucketingOf(flag), variant: e.variant!, index: i }];
  });
  if (fresh.length) {
    const stored = await recordStickyVariants(stickyEm, projectId, fresh);
    for (const f of fresh) {
      const variant = stored.get(f.flagId);
      if (variant === undefined || variant === f.variant) continue;
      assigned.set(f.flagId, variant); // another request recorded first: its variant
      evaluations[f.index] = evaluate(flags[f.index]);
    }
  }
  return evaluations;
}

/** Whether the evaluation's variant came from the variant hash (a matched condition without a variant of its own). */
function hashedVariant(flag: PreparedFlag, e: FlagEvaluation): boolean {
  if (!e.enabled || e.variant === undefined || e.reason.code !== 'condition_match') return false;
  const own = flag.filters.groups?.[e.reason.condition_index ?? -1]?.variant;
  return !(own && flag.filters.multivariate?.variants?.some((v) => v.key === own));
}
