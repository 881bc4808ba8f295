import { createHash } from 'node:crypto';

// PostHog's namespace for deterministic person UUIDs (the plugin server's uuidFromDistinctId).
const PERSON_NAMESPACE = '932979b4-65c3-4424-8467-0b66ec27bc22';

const NAMESPACE_BYTES = Buffer.from(PERSON_NAMESPACE.replace(/-/g, ''), 'hex');

/** UUIDv5 of "<project id>:<distinct id>": the same distinct id always yields the same new person uuid. */
export function personUuidFor(projectId: number, distinctId: string): string {
  const hash = createHash('sha1').update(NAMESPACE_BYTES).update(`${projectId}:${distinctId}`, 'utf8').digest();
  hash[6] = (hash[6] & 0x0f) | 0x50;
  hash[8] = (hash[8] & 0x3f) | 0x80;
  const hex = hash.subarray(0, 16).toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}
