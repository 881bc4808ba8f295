// The OpenAPI 3.1 document, generated from the same route declarations (and ajv schemas) the
// API validates with, so the reference can never drift from what the server accepts.
import { createRequire } from 'node:module';
import {
  ApiError,
  methodNotAllowed,
  notAuthenticated,
  notFound,
  payloadTooLarge,
  permissionDenied,
  throttled,
  unsupportedMediaType,
  validationError,
  gone,
  conflict,
} from '../http/errors.ts';
import type { RouteDefinition } from '../http/routes.ts';
import { withUndeclaredMembers, type JsonSchema } from '../http/validation.ts';
import { NAMED_SCHEMAS } from './components.ts';

const ERROR_SCHEMA = {
  type: 'object',
  required: ['type', 'code', 'detail', 'attr'],
  additionalProperties: false,
  properties: {
    type: {
      type: 'string',
      enum: ['validation_error', 'invalid_request', 'authentication_error', 'throttled_error', 'server_error'],
    },
    code: { type: 'string' },
    detail: { type: 'string' },
    attr: { type: ['string', 'null'] },
  },
} as const;

/**
 * A request schema as the server applies it: an object that lists its properties accepts (and ignores)
 * others, as ajv does by default and DRF does. Said explicitly so clients do not have to guess.
 */
const openRequestSchema = (schema: unknown) => withUndeclaredMembers(schema, true);

const NAME_OF = new Map<unknown, string>(Object.entries(NAMED_SCHEMAS).map(([name, schema]) => [schema, name]));
const DATA_KEYWORDS = new Set(['enum', 'const', 'default', 'examples', 'example']);

/** A copy of `schema` where each named schema it uses (found by identity) is a $ref to its component. */
function withRefs(schema: unknown, self?: unknown): unknown {
  if (schema !== self && NAME_OF.has(schema)) return { $ref: `#/components/schemas/${NAME_OF.get(schema)}` };
  if (Array.isArray(schema)) return schema.map((item) => withRefs(item));
  if (!schema || typeof schema !== 'object') return schema;
  return Object.fromEntries(
    Object.entries(schema).map(([key, value]) => [key, DATA_KEYWORDS.has(key) ? value : withRefs(value)]),
  );
}
const responseSchema = (schema: unknown) => withUndeclaredMembers(withRefs(schema), false);

/** `/api/projects/:project_id/persons/:id` → `/api/projects/{project_id}/persons/{id}/` (PostHog's form). */
export function openApiPath(path: string): string {
  if (path.startsWith('/_')) return path;
  return `${path.replace(/:([A-Za-z_]+)/g, '{$1}')}/`;
}

const PROJECT_ID = { type: 'string', description: 'Project id, or @current' };

/** Path parameters as the route declares them; a parameter it does not declare is a string. */
function pathParameters(route: RouteDefinition) {
  return [...route.path.matchAll(/:([A-Za-z_]+)/g)].map(([, name]) => ({
    name,
    in: 'path',
    required: true,
    schema: route.params?.[name] ?? (name === 'project_id' ? PROJECT_ID : { type: 'string' }),
  }));
}

/** Whether the route honours `format=csv` (its query declares the value). */
const takesCsv = (route: RouteDefinition) =>
  ((route.query?.properties as Record<string, { enum?: unknown[] }> | undefined)?.format?.enum ?? []).includes('csv');

/**
 * Whether a request may leave the body out: every field it carries can be sent in the query instead
 * (the seed's query forms of update_property, delete_property, bulk_delete). An empty body is `{}`.
 */
function bodyOptional(route: RouteDefinition): boolean {
  const body = Object.keys((route.body?.properties as object | undefined) ?? {});
  const query = (route.query?.properties as object | undefined) ?? {};
  const required = (documentedBody(route)?.required as string[] | undefined) ?? [];
  return body.length > 0 && required.length === 0 && body.every((name) => name in query);
}

/** The body schema with the members the handler requires itself marked required too. */
function documentedBody(route: RouteDefinition): JsonSchema | undefined {
  if (!route.body || !route.requiredByHandler) return route.body;
  const required = new Set([...((route.body.required as string[] | undefined) ?? []), ...route.requiredByHandler]);
  return { ...route.body, required: [...required] };
}

/**
 * A sample body per error status, made by the API's own error constructors (api/http/errors.ts), so the
 * reference shows each status its own error; generated from the schema alone, every sample was the
 * enum's first type, validation_error. A route may show another (`example` of its response).
 */
const ERROR_SAMPLES: Record<string, unknown> = {
  400: validationError('This field is required.', 'name', 'required').body,
  401: notAuthenticated().body,
  403: permissionDenied().body,
  404: notFound().body,
  405: methodNotAllowed('DELETE').body,
  409: conflict('Deletion request 42 is running; only a pending request can be cancelled.').body,
  410: gone('Access export 42 expired; its archive was removed. Request a new export.').body,
  413: payloadTooLarge(1024 * 1024).body,
  415: unsupportedMediaType('text/plain').body,
  422: new ApiError(
    422,
    'invalid_request',
    'idempotency_key_reused',
    'This Idempotency-Key was already used with a different request in the last 24 hours; use a new key.',
    'Idempotency-Key',
  ).body,
  429: throttled(1, 100).body,
  503: new ApiError(503, 'server_error', 'service_unavailable', 'The service is unavailable. Try again in a second.')
    .body,
};

/** PostHog's error body, with the route's sample or one fitting the status. */
const errorBody = (status: string, example: unknown = ERROR_SAMPLES[status]) => ({
  'application/json': { schema: { $ref: '#/components/schemas/Error' }, ...(example ? { example } : {}) },
});
const CSV_BODY = { 'text/csv': { schema: { type: 'string', description: 'With format=csv' } } };

function queryParameters(schema: JsonSchema | undefined) {
  const properties = (schema?.properties ?? {}) as Record<string, JsonSchema>;
  const required = new Set((schema?.required as string[] | undefined) ?? []);
  return Object.entries(properties).map(([name, property]) => ({
    name,
    in: 'query',
    required: required.has(name),
    schema: openRequestSchema(property),
    ...(typeof property.description === 'string' ? { description: property.description } : {}),
  }));
}

function operationId(route: RouteDefinition): string {
  const words = route.path
    .replace(/^\/api\/projects\/:project_id\/?/, '')
    .replace(/^\/api\/?/, '')
    .split('/')
    .filter((s) => s && !s.startsWith(':'));
  return (
    [route.method.toLowerCase(), ...words].join('_').replace(/[^a-zA-Z0-9_]/g, '_') +
    (route.path.endsWith('/:id') ? '_by_id' : '')
  );
}

/** The document's version is the package's. */
const PACKAGE_VERSION: string = createRequire(import.meta.url)('../../package.json').version;

export const API_TITLE = 'Project analytics management API (PostHog-compatible)';

export function buildOpenApiDocument(routes: RouteDefinition[], serverUrl?: string) {
  const paths: Record<string, Record<string, unknown>> = {};
  const seen = new Set<string>();
  for (const route of routes) {
    const path = openApiPath(route.path);
    const method = route.method.toLowerCase();
    let id = operationId(route);
    while (seen.has(id)) id += '_';
    seen.add(id);
    const authenticated = route.scopes !== null;
    const responses: Record<string, unknown> = {};
    for (const [status, response] of Object.entries(route.responses ?? { 200: { description: 'Success' } })) {
      // A non-JSON body (an HTML page, a CSV file) is a string unless its schema says more.
      const schema = response.schema
        ? responseSchema(response.schema)
        : response.contentType
          ? { type: 'string' }
          : undefined;
      // Every error the API answers is PostHog's error body, unless the route says it sends none.
      const content = schema
        ? { [response.contentType ?? 'application/json']: { schema } }
        : Number(status) >= 400 && !response.noBody
          ? errorBody(status, response.example)
          : undefined;
      // format=csv answers the same data as CSV.
      if (content && status.startsWith('2') && takesCsv(route)) Object.assign(content, CSV_BODY);
      responses[status] = { description: response.description, ...(content ? { content } : {}) };
    }
    if (authenticated) {
      responses['401'] ??= { description: 'No or invalid personal API key', content: errorBody('401') };
      responses['403'] ??= {
        description: 'Missing scope or no access to the project',
        content: errorBody('403'),
      };
      // An unknown project or object.
      if (route.path.includes('/:')) responses['404'] ??= { description: 'Not found', content: errorBody('404') };
    }
    if (route.body || route.query) responses['400'] ??= { description: 'Invalid input', content: errorBody('400') };
    const scopes = route.scopes ?? [];
    const accessNote = authenticated
      ? `Required scopes: ${scopes.length ? scopes.map((s) => `\`${s}\``).join(', ') : 'none (any valid personal API key)'}.`
      : 'No personal API key (see the endpoint description for its own authentication).';
    paths[path] ??= {};
    paths[path][method] = {
      operationId: id,
      summary: route.summary,
      tags: route.tags ?? [],
      description: route.personAccess
        ? `${accessNote} Recorded in the read-access log as \`${route.personAccess}\`: one row per answered request, naming the persons the answer holds (\`/persons/access_log/\`).`
        : accessNote,
      ...(route.personAccess ? { 'x-person-access': route.personAccess } : {}),
      'x-required-scopes': scopes,
      parameters: [
        ...pathParameters(route),
        ...queryParameters(route.query),
        ...Object.entries(route.headers ?? {}).map(([name, header]) => ({
          name,
          in: 'header',
          required: false,
          description: header.description,
          schema: header.schema,
        })),
      ],
      ...(route.body
        ? {
            requestBody: {
              required: !bodyOptional(route),
              content: { 'application/json': { schema: openRequestSchema(documentedBody(route)) } },
            },
          }
        : {}),
      responses,
      // Declared on purpose with error statuses only (a hard delete answered 405, key management refused).
      ...(route.responses && !Object.keys(route.responses).some((s) => s.startsWith('2'))
        ? { 'x-never-succeeds': true }
        : {}),
      security: authenticated ? [{ PersonalAPIKey: scopes }] : [],
    };
  }
  return {
    openapi: '3.1.0',
    info: {
      title: API_TITLE,
      version: PACKAGE_VERSION,
      description: 'Experiments, persons and event definitions inside a project, and event capture for SDKs.',
    },
    ...(serverUrl ? { servers: [{ url: serverUrl }] } : {}),
    paths,
    components: {
      securitySchemes: {
        PersonalAPIKey: { type: 'http', scheme: 'bearer', description: 'A personal API key, `phx_…`' },
      },
      schemas: {
        Error: ERROR_SCHEMA,
        ...Object.fromEntries(
          Object.entries(NAMED_SCHEMAS).map(([name, schema]) => [
            name,
            withUndeclaredMembers(withRefs(schema, schema), false),
          ]),
        ),
      },
    },
  };
}
