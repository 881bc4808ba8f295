// ajv validation with errors reported the way DRF reports them: only the first error, its
// DRF code (required, null, blank, invalid_choice, invalid_input, max_length, …) and `attr`
// as the JSON path joined with `__`.
import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import addFormatsModule from 'ajv-formats';
import { validationError, type ApiError } from './errors.ts';

export type JsonSchema = Record<string, unknown>;

const addFormats = addFormatsModule as unknown as (ajv: Ajv) => Ajv;

// Bodies are validated as sent; query strings arrive as strings, so they are coerced.
const bodyAjv = addFormats(new Ajv({ allErrors: false, strict: false, useDefaults: false }));
const queryAjv = addFormats(new Ajv({ allErrors: false, strict: false, coerceTypes: 'array', useDefaults: true }));

const cache = new WeakMap<JsonSchema, ValidateFunction>();
const queryCache = new WeakMap<JsonSchema, ValidateFunction>();

function compiled(schema: JsonSchema, forQuery: boolean): ValidateFunction {
  const store = forQuery ? queryCache : cache;
  let fn = store.get(schema);
  if (!fn) {
    fn = (forQuery ? queryAjv : bodyAjv).compile(schema);
    store.set(schema, fn);
  }
  return fn;
}

/** Validates `data` against `schema`; throws PostHog's 400 for the first problem found. */
export function validate<T>(schema: JsonSchema, data: unknown, options: { query?: boolean } = {}): T {
  const fn = compiled(schema, options.query ?? false);
  if (!fn(data)) throw toApiError(fn.errors?.[0], data);
  return data as T;
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
  let node: any = root;
  for (const part of pointer.split('/').slice(1)) {
    if (node === null || typeof node !== 'object') return undefined;
    node = node[part.replace(/~1/g, '/').replace(/~0/g, '~')];
  }
  return node;
}

function attrOf(pointer: string, extra?: string): string | null {
  const parts = pointer.split('/').slice(1).map((p) => p.replace(/~1/g, '/').replace(/~0/g, '~'));
  if (extra !== undefined) parts.push(extra);
  return parts.length ? parts.join('__') : null;
}

export function toApiError(error: ErrorObject | undefined, root: unknown): ApiError {
  if (!error) return validationError('Invalid input.');
  const value = valueAt(root, error.instancePath);
  const attr = attrOf(error.instancePath);
  const params = error.params as Record<string, any>;
  // A schema may name its own message (DRF-specific wording) with `errorMessage`.
  const custom = (error.parentSchema as Record<string, unknown> | undefined)?.errorMessage;
  switch (error.keyword) {
    case 'required':
      return validationError('This field is required.', attrOf(error.instancePath, params.missingProperty), 'required');
    case 'type': {
      if (value === null) return validationError('This field may not be null.', attr, 'null');
      const expected = String(params.type).split(',')[0];
      if (expected === 'array') return validationError(`Expected a list of items but got type "${describeJsonType(value)}".`, attr, 'not_a_list');
      if (expected === 'object')
        return validationError(`Expected a dictionary of items but got type "${describeJsonType(value)}".`, attr, 'not_a_dict');
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
      return validationError(typeof custom === 'string' ? custom : `Ensure this field has at least ${params.limit} elements.`, attr, 'min_length');
    case 'enum':
    case 'const':
      return validationError(`"${typeof value === 'string' ? value : JSON.stringify(value)}" is not a valid choice.`, attr, 'invalid_choice');
    case 'minimum':
      return validationError(`Ensure this value is greater than or equal to ${params.limit}.`, attr, 'min_value');
    case 'maximum':
      return validationError(`Ensure this value is less than or equal to ${params.limit}.`, attr, 'max_value');
    case 'additionalProperties':
      return validationError(`Unknown field "${params.additionalProperty}".`, attrOf(error.instancePath, params.additionalProperty));
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
  const fn = compiled(schema, false);
  if (fn(body)) return null;
  const error = fn.errors?.[0];
  return `${error?.instancePath || '/'} ${error?.message ?? 'does not match'}`;
}
