// The OpenAPI 3.1 document, generated from the same route declarations (and ajv schemas) the
// API validates with, so the reference can never drift from what the server accepts.
import type { RouteDefinition } from '../http/routes.ts';
import { closedResponseSchema, withUndeclaredMembers, type JsonSchema } from '../http/validation.ts';
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
function withRefs(schema: unknown, self?: unknown): any {
  if (schema !== self && NAME_OF.has(schema)) return { $ref: `#/components/schemas/${NAME_OF.get(schema)}` };
  if (Array.isArray(schema)) return schema.map((item) => withRefs(item));
  if (!schema || typeof schema !== 'object') return schema;
  return Object.fromEntries(
    Object.entries(schema).map(([key, value]) => [key, DATA_KEYWORDS.has(key) ? value : withRefs(value)]),
  );
}
const responseSchema = (schema: unknown) => closedResponseSchema(withRefs(schema));

/** `/api/projects/:project_id/persons/:id` → `/api/projects/{project_id}/persons/{id}/` (PostHog's form). */
export function openApiPath(path: string): string {
  if (path.startsWith('/_')) return path;
  return `${path.replace(/:([A-Za-z_]+)/g, '{$1}')}/`;
}

function pathParameters(path: string) {
  return [...path.matchAll(/:([A-Za-z_]+)/g)].map(([, name]) => ({
    name,
    in: 'path',
    required: true,
    schema: name === 'project_id' ? { type: 'string', description: 'Project id, or @current' } : { type: 'string' },
  }));
}

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
    const responses: Record<string, unknown> = {};
    for (const [status, response] of Object.entries(route.responses ?? { 200: { description: 'Success' } })) {
      // A non-JSON body (an HTML page, a CSV file) is a string unless its schema says more.
      const schema = response.schema
        ? responseSchema(response.schema)
        : response.contentType
          ? { type: 'string' }
          : undefined;
      responses[status] = {
        description: response.description,
        ...(schema ? { content: { [response.contentType ?? 'application/json']: { schema } } } : {}),
      };
    }
    const authenticated = route.scopes !== null;
    if (authenticated) {
      responses['401'] ??= {
        description: 'No or invalid personal API key',
        content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } },
      };
      responses['403'] ??= {
        description: 'Missing scope or no access to the project',
        content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } },
      };
    }
    if (route.body || route.query)
      responses['400'] ??= {
        description: 'Invalid input',
        content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } },
      };
    const scopes = route.scopes ?? [];
    paths[path] ??= {};
    paths[path][method] = {
      operationId: id,
      summary: route.summary,
      tags: route.tags ?? [],
      description: authenticated
        ? `Required scopes: ${scopes.length ? scopes.map((s) => `\`${s}\``).join(', ') : 'none (any valid personal API key)'}.`
        : 'No personal API key (see the endpoint description for its own authentication).',
      'x-required-scopes': scopes,
      parameters: [
        ...pathParameters(route.path),
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
            requestBody: { required: true, content: { 'application/json': { schema: openRequestSchema(route.body) } } },
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
      version: '1.0.0',
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
          Object.entries(NAMED_SCHEMAS).map(([name, schema]) => [name, closedResponseSchema(withRefs(schema, schema))]),
        ),
      },
    },
  };
}
