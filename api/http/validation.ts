// ajv validation with errors reported the way DRF reports them: only the first error, its
// DRF code (required, null, blank, invalid_choice, invalid_input, max_length, …) and `attr`
// as the JSON path joined with `__`.
import { Ajv, type ErrorObject, type FormatDefinition, type ValidateFunction } from 'ajv';
import addFormatsModule from 'ajv-formats';
import { validationError, type ApiError } from './errors.ts';
import { isStorableInstant } from '../../shared/platform/time.ts';

export type JsonSchema = Record<string, unknown>;

/** A closed schema's own sentence after "Unknown field …" (a keyword ajv ignores). */
export const UNDECLARED_MEMBER_NOTE = 'x-undeclared-member';

// ajv-formats is CommonJS: its default import is module.exports, which carries the plugin as `default` too.
const addFormats = addFormatsModule.default;

/**
 * Dates (`date-time`, `date`) must also fall within years 1–9999 UTC: ajv-formats takes year 0000 and
 * any offset, which PostgreSQL refuses or JavaScript prints as `+010000-…`.
 */
function withStorableDates(ajv: Ajv): Ajv {
  for (const name of ['date-time', 'date']) {
    const original = ajv.formats[name] as FormatDefinition<string>;
    const wellFormed = original.validate as (text: string) => boolean;
    const validate = (text: string) => wellFormed(text) && isStorableInstant(Date.parse(text));
    ajv.addFormat(name, { ...original, validate });
  }
  return ajv;
}

// Bodies are validated as sent; query strings arrive as strings, so they are coerced. strictNumbers:
// Infinity (what JSON.parse makes of 1e309) and NaN are not numbers.
const options = { allErrors: false, strict: false, strictNumbers: true } as const;
const requestAjv = withStorableDates(addFormats(new Ajv({ ...options, useDefaults: false })));
const queryAjv = withStorableDates(addFormats(new Ajv({ ...options, coerceTypes: 'array', useDefaults: true })));
// Responses are checked against their schemas as documented (closed objects included), without the
// request bounds below.
const responseAjv = addFormats(new Ajv({ ...options, useDefaults: false }));

// An integer goes into a PostgreSQL int4 column unless its schema says `format: 'int64'` (bigint ids);
// those stay within the integers a JavaScript number holds exactly.
const INT4 = { minimum: -(2 ** 31), maximum: 2 ** 31 - 1 };
const INT64 = { minimum: -Number.MAX_SAFE_INTEGER, maximum: Number.MAX_SAFE_INTEGER };
// Keywords whose values are data, not subschemas.
const DATA_KEYWORDS = new Set(['enum', 'const', 'default', 'examples', 'example']);

/** A JSON object (a schema or a member map), as opposed to a list or a scalar. */
const isJsonObject = (value: unknown): value is Record<string, unknown> =>
  value !== null && typeof value === 'object' && !Array.isArray(value);

/** withIntegerBounds() for any value inside a schema. */
function bounded(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(bounded);
  return isJsonObject(value) ? withIntegerBounds(value) : value;
}

/** A copy of a request schema where every integer without explicit bounds gets its column type's range. */
export function withIntegerBounds(schema: JsonSchema): JsonSchema {
  const copy: JsonSchema = {};
  for (const [key, value] of Object.entries(schema)) {
    copy[key] = DATA_KEYWORDS.has(key) ? value : bounded(value);
  }
  const type = copy.type;
  const integer = type === 'integer' || (Array.isArray(type) && type.includes('integer'));
  if (integer) {
    const range = copy.format === 'int64' ? INT64 : INT4;
    copy.minimum ??= range.minimum;
    copy.maximum ??= range.maximum;
  }
  return copy;
}

// Keywords whose value is one subschema, a list of them, or a map of them.
const SUBSCHEMA = ['additionalProperties', 'items', 'not', 'if', 'then', 'else', 'contains', 'unevaluatedItems'];
const SUBSCHEMA_LISTS = ['allOf', 'anyOf', 'oneOf', 'prefixItems'];
const SUBSCHEMA_MAPS = ['properties', 'patternProperties', 'dependentSchemas', '$defs'];

/**
 * A copy of `schema` where every object that lists its properties and says nothing of others gets
 * `additionalProperties: value`. Keyword-aware: a property named `properties` is not a keyword.
 */
export function withUndeclaredMembers(schema: unknown, value: boolean): unknown {
  return isJsonObject(schema) ? withUndeclaredMembersOf(schema, value) : schema;
}

/** withUndeclaredMembers() of a schema object. */
function withUndeclaredMembersOf(schema: JsonSchema, value: boolean): JsonSchema {
  const copy: JsonSchema = { ...schema };
  const walk = (sub: unknown) => withUndeclaredMembers(sub, value);
  for (const key of SUBSCHEMA) {
    const sub = copy[key];
    if (sub && typeof sub === 'object') copy[key] = walk(sub);
  }
  for (const key of SUBSCHEMA_LISTS) {
    const list = copy[key];
    if (Array.isArray(list)) copy[key] = list.map(walk);
  }
  for (const key of SUBSCHEMA_MAPS) {
    const map = copy[key];
    if (map && typeof map === 'object')
      copy[key] = Object.fromEntries(Object.entries(map).map(([name, sub]) => [name, walk(sub)]));
  }
  // Combinators would make closed branches refuse each other's members; none of ours close through them.
  if (copy.properties && copy.additionalProperties === undefined && !copy.allOf && !copy.unevaluatedProperties) {
    copy.additionalProperties = value;
  }
  return copy;
}

/**
 * A response schema as checked and documented: objects that list their properties are closed, so a
 * response must not carry fields its document does not declare. Free-form values declare
 * `additionalProperties: true` (or are `{}`) and stay open.
 */
export const closedResponseSchema = (schema: JsonSchema): JsonSchema => withUndeclaredMembersOf(schema, false);

type Use = 'body' | 'query' | 'response';
const caches: Record<Use, WeakMap<JsonSchema, ValidateFunction>> = {
  body: new WeakMap(),
  query: new WeakMap(),
  response: new WeakMap(),
};

function compiled(schema: JsonSchema, use: Use): ValidateFunction {
  let fn = caches[use].get(schema);
  if (!fn) {
    if (use === 'response') fn = responseAjv.compile(closedResponseSchema(schema));
    else fn = (use === 'query' ? queryAjv : requestAjv).compile(withIntegerBounds(schema));
    caches[use].set(schema, fn);
  }
  return fn;
}

/** Validates `data` against `schema`; throws PostHog's 400 for the first problem found. */
export function validate<T>(schema: JsonSchema, data: unknown, options: { query?: boolean } = {}): T {
  const fn = compiled(schema, options.query ? 'query' : 'body');
  if (!fn(data)) throw toApiError(fn.errors?.[0], data);
  if (options.query) {
    const error = nonFiniteNumberError(schema, data, []);
    if (error) throw error;
  }
  return data as T;
}

/**
 * ajv coerces the query strings "1e309" and "Infinity" to Infinity and then skips its number checks
 * (strictNumbers does not cover coerced values), so the coerced query is checked once more here.
 */
function nonFiniteNumberError(schema: unknown, value: unknown, path: string[]): ApiError | null {
  const keyword = (name: string) => (isJsonObject(schema) ? schema[name] : undefined);
  if (typeof value === 'number' && !Number.isFinite(value)) {
    const type = keyword('type');
    const integer = type === 'integer' || (Array.isArray(type) && type.includes('integer'));
    return validationError(integer ? TYPE_MESSAGES.integer : TYPE_MESSAGES.number, path.join('__') || null);
  }
  if (Array.isArray(value)) {
    for (const [i, inner] of value.entries()) {
      const error = nonFiniteNumberError(keyword('items'), inner, [...path, String(i)]);
      if (error) return error;
    }
  } else if (value && typeof value === 'object') {
    const properties = keyword('properties');
    for (const [key, inner] of Object.entries(value)) {
      const error = nonFiniteNumberError(isJsonObject(properties) ? properties[key] : undefined, inner, [...path, key]);
      if (error) return error;
    }
  }
  return null;
}

const TYPE_MESSAGES: Record<string, string> = {
  integer: 'A valid integer is required.',
  number: 'A valid number is required.',
  boolean: 'Must be a valid boolean.',
  string: 'Not a valid string.',
};

function describeJsonType(value: unknown): string {
  if (Array.isArray(value)) return 'list';
  if (value === null) return 'NoneType';
  if (typeof value === 'string') return 'str';
  if (typeof value === 'number') return Number.isInteger(value) ? 'int' : 'float';
  if (typeof value === 'boolean') return 'bool';
  return 'dict';
}

function valueAt(root: unknown, pointer: string): unknown {
  if (!pointer) return root;
  let node = root;
  for (const part of pointer.split('/').slice(1)) {
    const name = part.replace(/~1/g, '/').replace(/~0/g, '~');
    if (Array.isArray(node)) node = node[Number(name)];
    else if (isJsonObject(node)) node = node[name];
    else return undefined;
  }
  return node;
}

function attrOf(pointer: string, extra?: string): string | null {
  const parts = pointer
    .split('/')
    .slice(1)
    .map((p) => p.replace(/~1/g, '/').replace(/~0/g, '~'));
  if (extra !== undefined) parts.push(extra);
  return parts.length ? parts.join('__') : null;
}

export function toApiError(error: ErrorObject | undefined, root: unknown): ApiError {
  if (!error) return validationError('Invalid input.');
  const value = valueAt(root, error.instancePath);
  const attr = attrOf(error.instancePath);
  const params: Record<string, unknown> = error.params;
  // A schema may name its own message (DRF-specific wording) with `errorMessage`.
  const custom = (error.parentSchema as Record<string, unknown> | undefined)?.errorMessage;
  switch (error.keyword) {
    case 'required':
      return validationError(
        'This field is required.',
        attrOf(error.instancePath, String(params.missingProperty)),
        'required',
      );
    case 'type': {
      if (value === null) return validationError('This field may not be null.', attr, 'null');
      const expected = String(params.type).split(',')[0];
      if (expected === 'array')
        return validationError(
          `Expected a list of items but got type "${describeJsonType(value)}".`,
          attr,
          'not_a_list',
        );
      if (expected === 'object')
        return validationError(
          `Expected a dictionary of items but got type "${describeJsonType(value)}".`,
          attr,
          'not_a_dict',
        );
      return validationError(typeof custom === 'string' ? custom : (TYPE_MESSAGES[expected] ?? 'Invalid input.'), attr);
    }
    case 'minLength':
      if (value === '') return validationError('This field may not be blank.', attr, 'blank');
      return validationError(`Ensure this field has at least ${params.limit} characters.`, attr, 'min_length');
    case 'maxLength':
      return validationError(`Ensure this field has no more than ${params.limit} characters.`, attr, 'max_length');
    case 'maxItems':
      return validationError(`Ensure this field has no more than ${params.limit} elements.`, attr, 'max_length');
    case 'minItems':
      return validationError(
        typeof custom === 'string' ? custom : `Ensure this field has at least ${params.limit} elements.`,
        attr,
        'min_length',
      );
    case 'enum':
    case 'const':
      return validationError(
        `"${typeof value === 'string' ? value : JSON.stringify(value)}" is not a valid choice.`,
        attr,
        'invalid_choice',
      );
    case 'minimum':
      return validationError(`Ensure this value is greater than or equal to ${params.limit}.`, attr, 'min_value');
    case 'maximum':
      return validationError(`Ensure this value is less than or equal to ${params.limit}.`, attr, 'max_value');
    case 'exclusiveMinimum':
      return validationError(`Ensure this value is greater than ${params.limit}.`, attr, 'min_value');
    case 'exclusiveMaximum':
      return validationError(`Ensure this value is less than ${params.limit}.`, attr, 'max_value');
    case 'additionalProperties': {
      const note = (error.parentSchema as Record<string, unknown> | undefined)?.[UNDECLARED_MEMBER_NOTE];
      return validationError(
        `Unknown field "${params.additionalProperty}".${typeof note === 'string' ? ` ${note}` : ''}`,
        attrOf(error.instancePath, String(params.additionalProperty)),
      );
    }
    case 'format':
      if (params.format === 'date-time')
        return validationError(
          'Datetime has wrong format. Use one of these formats instead: YYYY-MM-DDThh:mm[:ss[.uuuuuu]][+HH:MM|-HH:MM|Z].',
          attr,
        );
      if (params.format === 'uuid') return validationError('Must be a valid UUID.', attr);
      return validationError(`Enter a valid ${params.format}.`, attr);
    default:
      return validationError(typeof custom === 'string' ? custom : (error.message ?? 'Invalid input.'), attr);
  }
}

/**
 * Checks a response body against its documented schema; returns a description of the first
 * mismatch, or null. Used in tests (VALIDATE_RESPONSES=1) so every request checks the OpenAPI document.
 */
export function responseMismatch(schema: JsonSchema, body: unknown): string | null {
  const fn = compiled(schema, 'response');
  if (fn(body)) return null;
  const error = fn.errors?.[0];
  return `${error?.instancePath || '/'} ${error?.message ?? 'does not match'}`;
}
