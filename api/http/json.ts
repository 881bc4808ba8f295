// JSON request bodies: nesting depth checked on the raw bytes before parsing, and values PostgreSQL
// or JSON cannot hold (NUL, lone surrogates, numbers past a double) found after it. Query parameters
// that carry JSON (`properties`, `ids`, `events`, …) get the same depth check before a handler parses them.
import { parseError, validationError } from './errors.ts';

/** Far deeper than any body the API takes: filters and metrics nest a handful of levels. */
export const MAX_JSON_DEPTH = 64;

const OPEN_ARRAY = 0x5b;
const OPEN_OBJECT = 0x7b;
const CLOSE_ARRAY = 0x5d;
const CLOSE_OBJECT = 0x7d;
const QUOTE = 0x22;
const BACKSLASH = 0x5c;

/**
 * Whether brackets outside strings nest deeper than `limit`. One pass over the bytes (UTF-8 never
 * uses bytes below 0x80 inside a multi-byte character), so a 1 MB body of `[` costs about a
 * millisecond instead of half a second of parsing and a stack overflow further on.
 */
export function nestedDeeperThan(raw: Uint8Array, limit: number): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < raw.length; i++) {
    const byte = raw[i];
    if (inString) {
      if (byte === BACKSLASH) i++;
      else if (byte === QUOTE) inString = false;
    } else if (byte === QUOTE) inString = true;
    else if (byte === OPEN_ARRAY || byte === OPEN_OBJECT) {
      if (++depth > limit) return true;
    } else if (byte === CLOSE_ARRAY || byte === CLOSE_OBJECT) depth--;
  }
  return false;
}

/** Parses a JSON body, refusing (400 parse_error) one nested deeper than MAX_JSON_DEPTH. */
export function parseJsonBody(raw: Buffer): unknown {
  if (nestedDeeperThan(raw, MAX_JSON_DEPTH))
    throw parseError(`JSON parse error - nested deeper than ${MAX_JSON_DEPTH} levels.`);
  try {
    return JSON.parse(raw.toString('utf8'));
  } catch (error) {
    throw parseError(`JSON parse error - ${(error as Error).message}`);
  }
}

/**
 * Throws 400 on the first query parameter holding JSON nested deeper than MAX_JSON_DEPTH: handlers
 * parse and walk such parameters, and 7,000 levels fit in a URL. Text that is not JSON is left alone.
 */
export function rejectDeepJsonParameters(query: Record<string, unknown>): void {
  for (const [name, value] of Object.entries(query)) {
    for (const text of Array.isArray(value) ? value : [value]) {
      if (typeof text !== 'string' || !/^\s*[[{]/.test(text)) continue;
      if (!nestedDeeperThan(Buffer.from(text), MAX_JSON_DEPTH)) continue;
      if (isJson(text)) throw validationError(`JSON nested deeper than ${MAX_JSON_DEPTH} levels.`, name, 'parse_error');
    }
  }
}

function isJson(text: string): boolean {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}

const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/** DRF's CharField refusals, in its words: NUL and surrogate code points cannot be stored as text. */
function stringProblem(text: string): { detail: string; code: string } | null {
  if (text.includes('\u0000'))
    return { detail: 'Null characters are not allowed.', code: 'null_characters_not_allowed' };
  if (text.isWellFormed()) return null;
  const codePoint = LONE_SURROGATE.exec(text)![0].charCodeAt(0).toString(16).toUpperCase();
  return { detail: `Surrogate characters are not allowed: U+${codePoint}.`, code: 'surrogate_characters_not_allowed' };
}

/**
 * Throws PostHog's 400 for the first string (value or key) holding a NUL or a lone surrogate, or number
 * beyond a double (JSON.parse reads 1e309 as Infinity), with `attr` naming where it is (`a__b__0`).
 */
export function rejectUnstorableValues(value: unknown, path: string[] = []): void {
  const attr = () => path.join('__') || null;
  if (typeof value === 'string') {
    const problem = stringProblem(value);
    if (problem) throw validationError(problem.detail, attr(), problem.code);
  } else if (typeof value === 'number') {
    if (!Number.isFinite(value)) throw validationError('A valid number is required.', attr(), 'invalid');
  } else if (value && typeof value === 'object') {
    for (const [key, inner] of Object.entries(value)) {
      path.push(key);
      const problem = stringProblem(key);
      if (problem) throw validationError(problem.detail, attr(), problem.code);
      rejectUnstorableValues(inner, path);
      path.pop();
    }
  }
}
