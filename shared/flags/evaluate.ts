// Feature flag evaluation as PostHog does it, so the same person gets the same variant here, in
// PostHog, and in an SDK evaluating locally: SHA-1 bucketing of "<flag key>.<distinct id><salt>",
// release conditions in order, multivariate lookup table, holdout exclusion first.
import { hash } from 'node:crypto';

export interface PropertyFilter {
  key: string;
  value?: unknown;
  operator?: string;
  type?: string;
}

export interface ReleaseCondition {
  properties?: PropertyFilter[];
  rollout_percentage?: number | null;
  variant?: string | null;
}

export interface FlagVariant {
  key: string;
  name?: string | null;
  rollout_percentage: number;
}

export interface FlagFilters {
  groups?: ReleaseCondition[];
  multivariate?: { variants: FlagVariant[] } | null;
  payloads?: Record<string, unknown>;
  holdout?: { id: number; exclusion_percentage: number } | null;
  aggregation_group_type_index?: number | null;
}

export interface FlagDefinition {
  id: number;
  key: string;
  version: number;
  active: boolean;
  deleted: boolean;
  filters: FlagFilters;
}

export type FlagReasonCode =
  | 'condition_match'
  | 'no_condition_match'
  | 'out_of_rollout_bound'
  | 'holdout'
  | 'disabled'
  | 'no_group_type';

export interface FlagEvaluation {
  key: string;
  id: number;
  version: number;
  enabled: boolean;
  variant: string | undefined;
  reason: { code: FlagReasonCode; condition_index: number | null; description: string };
  payload: unknown;
}

// biome-ignore lint/correctness/noPrecisionLoss: PostHog's own constant; its float rounding is part of the hash
const LONG_SCALE = 0xfffffffffffffff;

/** A number in [0, 1): PostHog's hash of the flag key, the bucketing value and a salt. */
export function flagHash(key: string, bucketingValue: string, salt = '', separator = '.'): number {
  const hex = hash('sha1', `${key}${separator}${bucketingValue}${salt}`, 'hex');
  return parseInt(hex.slice(0, 15), 16) / LONG_SCALE;
}

export function variantFor(key: string, bucketingValue: string, variants: FlagVariant[]): string | undefined {
  const hash = flagHash(key, bucketingValue, 'variant');
  let min = 0;
  for (const variant of variants) {
    const max = min + variant.rollout_percentage / 100;
    if (hash >= min && hash < max) return variant.key;
    min = max;
  }
  return undefined;
}

function holdoutVariant(holdout: FlagFilters['holdout'], bucketingValue: string): string | undefined {
  if (!holdout || holdout.id == null || holdout.exclusion_percentage == null) return undefined;
  const percentage = Math.min(Math.max(Number(holdout.exclusion_percentage), 0), 100);
  if (!Number.isFinite(percentage)) return undefined;
  if (percentage !== 100 && flagHash('holdout', bucketingValue, '', '-') > percentage / 100) return undefined;
  return `holdout-${holdout.id}`;
}

/** Conditions on person properties (no type means person); cohort, event and group filters are not. */
export const isPersonFilter = (filter: PropertyFilter) => filter.type === undefined || filter.type === 'person';

/**
 * The person properties a flag's release conditions read: evaluating it needs the stored person
 * unless the SDK sent them all.
 */
export function personPropertyKeys(filters: FlagFilters): string[] {
  const keys = new Set<string>();
  for (const condition of Array.isArray(filters?.groups) ? filters.groups : []) {
    for (const filter of Array.isArray(condition?.properties) ? condition.properties : []) {
      if (filter && isPersonFilter(filter)) keys.add(String(filter.key));
    }
  }
  return [...keys];
}

const asList = (value: unknown): unknown[] => (Array.isArray(value) ? value : [value]);
const asNumber = (value: unknown): number | null => {
  const n = typeof value === 'number' ? value : typeof value === 'string' && value.trim() !== '' ? Number(value) : NaN;
  return Number.isFinite(n) ? n : null;
};

/** One person-property condition, PostHog's operators. A missing property never matches (except is_not_set). */
export function propertyMatches(filter: PropertyFilter, properties: Record<string, unknown>): boolean {
  const operator = filter.operator ?? 'exact';
  const present = Object.hasOwn(properties, filter.key);
  if (operator === 'is_not_set') return !present;
  if (!present) return false;
  const actual = properties[filter.key];
  if (operator === 'is_set') return true;
  const text = (v: unknown) => String(v).toLowerCase();
  switch (operator) {
    case 'exact':
      return asList(filter.value).some((v) => text(v) === text(actual));
    case 'is_not':
      return asList(filter.value).every((v) => text(v) !== text(actual));
    case 'icontains':
      return text(actual).includes(text(filter.value));
    case 'not_icontains':
      return !text(actual).includes(text(filter.value));
    case 'regex':
    case 'not_regex': {
      let matched: boolean;
      try {
        matched = new RegExp(String(filter.value)).test(String(actual));
      } catch {
        return false;
      }
      return operator === 'regex' ? matched : !matched;
    }
    case 'gt':
    case 'gte':
    case 'lt':
    case 'lte': {
      const a = asNumber(actual);
      const b = asNumber(filter.value);
      if (a === null || b === null) {
        const [x, y] = [String(actual), String(filter.value)];
        return operator === 'gt' ? x > y : operator === 'gte' ? x >= y : operator === 'lt' ? x < y : x <= y;
      }
      return operator === 'gt' ? a > b : operator === 'gte' ? a >= b : operator === 'lt' ? a < b : a <= b;
    }
    case 'is_date_before':
    case 'is_date_after': {
      const a = Date.parse(String(actual));
      const b = Date.parse(String(filter.value));
      if (Number.isNaN(a) || Number.isNaN(b)) return false;
      return operator === 'is_date_before' ? a < b : a > b;
    }
    default:
      return false;
  }
}

/**
 * Evaluates one flag for one person. `bucketingValue` is the distinct id (or the hash-key override
 * kept for experience continuity); `properties` are the stored person properties overlaid with the
 * ones the SDK sent; `assigned`, the variant a sticky flag first served this bucketing value, takes
 * the place of the hash's (a condition's own variant and the holdout still come first).
 */
export function evaluateFlag(
  flag: FlagDefinition,
  bucketingValue: string,
  properties: Record<string, unknown>,
  assigned?: string,
): FlagEvaluation {
  const payloadFor = (value: string | boolean) => flag.filters.payloads?.[String(value)] ?? null;
  const result = (
    enabled: boolean,
    variant: string | undefined,
    code: FlagReasonCode,
    index: number | null,
    description: string,
  ): FlagEvaluation => ({
    key: flag.key,
    id: flag.id,
    version: flag.version,
    enabled,
    variant,
    reason: { code, condition_index: index, description },
    payload: enabled ? payloadFor(variant ?? true) : null,
  });
  if (!flag.active || flag.deleted) return result(false, undefined, 'disabled', null, 'Feature flag is disabled');
  const holdout = holdoutVariant(flag.filters.holdout, bucketingValue);
  if (holdout) return result(true, holdout, 'holdout', null, 'Holdout group');
  const variants = flag.filters.multivariate?.variants ?? [];
  const conditions = flag.filters.groups ?? [];
  let outOfRollout: number | null = null;
  for (const [index, condition] of conditions.entries()) {
    const propertyFilters = (condition.properties ?? []).filter(isPersonFilter);
    if (!propertyFilters.every((p) => propertyMatches(p, properties))) continue;
    const rollout = condition.rollout_percentage;
    if (rollout != null && flagHash(flag.key, bucketingValue) > rollout / 100) {
      outOfRollout ??= index;
      continue;
    }
    const override =
      condition.variant && variants.some((v) => v.key === condition.variant) ? condition.variant : undefined;
    const kept = assigned !== undefined && variants.some((v) => v.key === assigned) ? assigned : undefined;
    const variant = override ?? kept ?? (variants.length ? variantFor(flag.key, bucketingValue, variants) : undefined);
    return result(true, variant, 'condition_match', index, `Matched condition set ${index + 1}`);
  }
  if (outOfRollout !== null)
    return result(
      false,
      undefined,
      'out_of_rollout_bound',
      outOfRollout,
      `Out of rollout bound for condition set ${outOfRollout + 1}`,
    );
  return result(false, undefined, 'no_condition_match', null, 'No matching condition set');
}
