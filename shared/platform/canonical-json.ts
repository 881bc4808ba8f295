// The one canonical JSON: RFC 8785 (JSON Canonicalization Scheme) by the `canonicalize` library. Object
// members sorted by their UTF-16 code units, no whitespace, numbers as ECMAScript prints them; undefined
// members left out, non-finite numbers and lone surrogates refused. Deletion receipts sign these bytes,
// metric fingerprints and deletion idempotency keys hash them.
import canonicalize from 'canonicalize';

export function canonicalJson(value: unknown): string {
  const text = canonicalize(value);
  if (text === undefined) throw new Error('canonical JSON of a value JSON cannot hold');
  return text;
}
