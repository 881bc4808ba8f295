// Checks an OpenAPI 3.1 document without a dedicated validator: the document's structure, every
// Schema Object against the JSON Schema 2020-12 meta-schema (OpenAPI 3.1's default dialect), and
// the lint rules generated clients depend on. Each problem is one line naming its JSON pointer.
import { Ajv2020 } from 'ajv/dist/2020.js';

type Json = Record<string, any>;

const METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'];
const PARAMETER_LOCATIONS = ['query', 'header', 'path', 'cookie'];
// Status codes that never carry a body.
const BODYLESS = new Set(['204', '205', '304']);
// Keywords whose value is one subschema / a list of them / a map of them.
const ONE = [
  'additionalProperties',
  'items',
  'not',
  'if',
  'then',
  'else',
  'contains',
  'propertyNames',
  'unevaluatedItems',
  'unevaluatedProperties',
];
const LIST = ['allOf', 'anyOf', 'oneOf', 'prefixItems'];
const MAP = ['properties', 'patternProperties', 'dependentSchemas', '$defs'];

const esc = (key: string) => key.replace(/~/g, '~0').replace(/\//g, '~1');

/** Every (sub)schema in `schema`, with its pointer. */
function* walkSchema(schema: unknown, pointer: string): Generator<[Json, string]> {
  if (!schema || typeof schema !== 'object' || Array.isArray(schema)) return;
  const s = schema as Json;
  yield [s, pointer];
  for (const k of ONE) if (s[k] && typeof s[k] === 'object') yield* walkSchema(s[k], `${pointer}/${k}`);
  for (const k of LIST)
    if (Array.isArray(s[k])) for (const [i, sub] of s[k].entries()) yield* walkSchema(sub, `${pointer}/${k}/${i}`);
  for (const k of MAP)
    if (s[k] && typeof s[k] === 'object')
      for (const [name, sub] of Object.entries(s[k])) yield* walkSchema(sub, `${pointer}/${k}/${esc(name)}`);
}

const types = (s: Json): string[] => (Array.isArray(s.type) ? s.type : s.type === undefined ? [] : [s.type]);

/** The top-level Schema Objects of the document (parameters, bodies, responses, components), with pointers. */
export function documentSchemas(doc: Json): [Json, string][] {
  const found: [Json, string][] = [];
  for (const [name, schema] of Object.entries(doc.components?.schemas ?? {}))
    found.push([schema as Json, `/components/schemas/${esc(name)}`]);
  for (const [path, item] of Object.entries(doc.paths ?? {})) {
    for (const method of METHODS) {
      const op = (item as Json)[method];
      if (!op) continue;
      const at = `/paths/${esc(path)}/${method}`;
      for (const [i, p] of (op.parameters ?? []).entries())
        if (p.schema) found.push([p.schema, `${at}/parameters/${i}/schema`]);
      for (const [type, media] of Object.entries(op.requestBody?.content ?? {}))
        if ((media as Json).schema)
          found.push([(media as Json).schema, `${at}/requestBody/content/${esc(type)}/schema`]);
      for (const [status, response] of Object.entries(op.responses ?? {}))
        for (const [type, media] of Object.entries((response as Json).content ?? {}))
          if ((media as Json).schema)
            found.push([(media as Json).schema, `${at}/responses/${status}/content/${esc(type)}/schema`]);
    }
  }
  return found;
}

function resolves(doc: Json, ref: string): boolean {
  if (!ref.startsWith('#/')) return false;
  let node: any = doc;
  for (const part of ref.slice(2).split('/')) {
    const key = part.replace(/~1/g, '/').replace(/~0/g, '~');
    if (!node || typeof node !== 'object' || !(key in node)) return false;
    node = node[key];
  }
  return node !== undefined;
}

/** Structural problems: what an OpenAPI 3.1 validator would refuse. */
export function structuralProblems(doc: Json): string[] {
  const problems: string[] = [];
  if (doc.openapi !== '3.1.0') problems.push(`/openapi is ${JSON.stringify(doc.openapi)}, not 3.1.0`);
  if (typeof doc.info?.title !== 'string' || typeof doc.info?.version !== 'string')
    problems.push('/info needs title and version strings');
  if (!doc.paths || typeof doc.paths !== 'object') problems.push('/paths is missing');
  const schemes = doc.components?.securitySchemes ?? {};
  const operationIds = new Set<string>();
  const templates = new Map<string, string>();
  for (const [path, item] of Object.entries(doc.paths ?? {})) {
    if (!path.startsWith('/')) problems.push(`/paths/${esc(path)} does not start with /`);
    // Two paths that differ only in their parameter names are the same path to OpenAPI.
    const template = path.replace(/\{[^}]+\}/g, '{}');
    if (templates.has(template))
      problems.push(`/paths/${esc(path)} is the same template as ${templates.get(template)}`);
    templates.set(template, path);
    const inPath = [...path.matchAll(/\{([^}]+)\}/g)].map((m) => m[1]);
    for (const key of Object.keys(item as Json))
      if (
        !METHODS.includes(key) &&
        !['parameters', 'summary', 'description', 'servers'].includes(key) &&
        !key.startsWith('x-')
      )
        problems.push(`/paths/${esc(path)}/${key} is not a field of a Path Item`);
    for (const method of METHODS) {
      const op = (item as Json)[method];
      if (!op) continue;
      const at = `/paths/${esc(path)}/${method}`;
      if (typeof op.operationId === 'string') {
        if (operationIds.has(op.operationId)) problems.push(`${at}/operationId ${op.operationId} is not unique`);
        operationIds.add(op.operationId);
      }
      const seen = new Set<string>();
      for (const [i, p] of (op.parameters ?? []).entries()) {
        if (typeof p.name !== 'string' || !PARAMETER_LOCATIONS.includes(p.in))
          problems.push(`${at}/parameters/${i} needs a name and a valid in`);
        if (seen.has(`${p.in}:${p.name}`)) problems.push(`${at}/parameters/${i} ${p.name} is declared twice`);
        seen.add(`${p.in}:${p.name}`);
        if (p.in === 'path' && p.required !== true)
          problems.push(`${at}/parameters/${i} path parameter ${p.name} must be required`);
        if (p.in === 'path' && !inPath.includes(p.name))
          problems.push(`${at}/parameters/${i} path parameter ${p.name} is not in the path`);
        if (!p.schema && !p.content) problems.push(`${at}/parameters/${i} has neither schema nor content`);
      }
      for (const name of inPath)
        if (!seen.has(`path:${name}`)) problems.push(`${at} does not declare path parameter ${name}`);
      if (op.requestBody && (!op.requestBody.content || !Object.keys(op.requestBody.content).length))
        problems.push(`${at}/requestBody has no content`);
      const responses = Object.entries(op.responses ?? {});
      if (!responses.length) problems.push(`${at}/responses is empty`);
      for (const [status, response] of responses) {
        if (!/^([1-5]\d\d|[1-5]XX|default)$/.test(status))
          problems.push(`${at}/responses/${status} is not a status code`);
        if (typeof (response as Json).description !== 'string')
          problems.push(`${at}/responses/${status} has no description`);
      }
      for (const [i, requirement] of (op.security ?? []).entries())
        for (const name of Object.keys(requirement))
          if (!schemes[name]) problems.push(`${at}/security/${i} names unknown scheme ${name}`);
    }
  }
  // Every Schema Object must itself be a valid JSON Schema 2020-12 schema.
  const ajv = new Ajv2020({ strict: false, validateFormats: false });
  for (const [schema, pointer] of documentSchemas(doc)) {
    if (!ajv.validateSchema(schema))
      problems.push(`${pointer} is not a valid JSON Schema: ${ajv.errorsText(ajv.errors)}`);
  }
  return problems;
}

/** Lint problems: what makes a generated client wrong or unusable although the document is valid. */
export function lintProblems(doc: Json): string[] {
  const problems: string[] = [];
  for (const [root, rootPointer] of documentSchemas(doc)) {
    for (const [s, pointer] of walkSchema(root, rootPointer)) {
      if (typeof s.$ref === 'string' && !resolves(doc, s.$ref))
        problems.push(`${pointer}/$ref ${s.$ref} does not resolve`);
      for (const name of s.required ?? [])
        if (!(name in (s.properties ?? {}))) problems.push(`${pointer} requires ${name}, which it does not define`);
      const isObject = types(s).includes('object') || (s.type === undefined && (s.properties || s.required));
      if (isObject && s.additionalProperties === undefined && s.unevaluatedProperties === undefined)
        problems.push(`${pointer} is an object that does not declare additionalProperties`);
      if (types(s).includes('array') && s.items === undefined && s.prefixItems === undefined)
        problems.push(`${pointer} is an array that does not declare its items`);
    }
  }
  for (const [path, item] of Object.entries(doc.paths ?? {})) {
    for (const method of METHODS) {
      const op = (item as Json)[method];
      if (!op) continue;
      const at = `/paths/${esc(path)}/${method}`;
      const success = Object.entries(op.responses ?? {}).filter(([status]) => /^2/.test(status));
      // An operation that never succeeds (a hard delete answered 405) says so with x-never-succeeds.
      if (!success.length && !op['x-never-succeeds']) problems.push(`${at} declares no 2xx response`);
      for (const [status, response] of success) {
        if (BODYLESS.has(status)) continue;
        const content = Object.entries((response as Json).content ?? {});
        if (!content.length) problems.push(`${at}/responses/${status} declares no content (204 if there is no body)`);
        for (const [type, media] of content)
          if (/json/.test(type) && !(media as Json).schema)
            problems.push(`${at}/responses/${status}/content/${esc(type)} has no schema`);
      }
    }
  }
  return problems;
}
