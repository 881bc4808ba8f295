// One declaration per route: method, path, scopes and schemas in one place. The same list mounts
// the routes here and feeds the OpenAPI document.
import type { EntityManager } from '@mikro-orm/postgresql';
import type { FromSchema, JSONSchema } from 'json-schema-to-ts';
import type { Context, Middleware } from 'koa';
import { authenticate, requireScopes, resolveProject, type AuthenticatedKey, type ProjectRow } from './auth.ts';
import { readRawBody } from './body.ts';
import { ApiError, permissionDenied, unsupportedMediaType } from './errors.ts';
import { parseJsonBody, rejectDeepJsonParameters, rejectUnstorableValues } from './json.ts';
import { enforceThrottle } from './throttle.ts';
import { responseMismatch, validate, type JsonSchema } from './validation.ts';
import type { AppDeps } from '../deps.ts';
import type { Actor } from '../../shared/activity-log.ts';

export type HttpMethod = 'GET' | 'POST' | 'PATCH' | 'PUT' | 'DELETE' | 'OPTIONS';

export interface RouteState<Q = Record<string, any>, B = any> {
  em: EntityManager;
  auth: AuthenticatedKey;
  project: ProjectRow;
  query: Q;
  body: B;
  params: Record<string, string>;
}

export interface ApiContext<Q = Record<string, any>, B = any> extends Context {
  state: RouteState<Q, B> & Record<string, any>;
  deps: AppDeps;
}

export interface RouteDefinition<Q = any, B = any> {
  method: HttpMethod;
  /** Koa-router path, without trailing slash; `:project_id` makes the route project-scoped. */
  path: string;
  summary: string;
  tags?: string[];
  /**
   * Scopes a personal API key needs. `[]`: any valid key (the seed lists none).
   * `null`: no personal-API-key auth at all (capture, health) — the handler authenticates itself.
   */
  scopes: string[] | null;
  /** `false`: PostHog refuses personal API keys here whatever their scopes (key management). */
  personalApiKeyAccess?: false;
  query?: JsonSchema;
  body?: JsonSchema;
  /** Documented response schema per status, for OpenAPI and the contract test. */
  responses?: Record<number, { description: string; schema?: JsonSchema; contentType?: string }>;
  /** The handler reads the body itself (capture's gzip / form / base64 payloads). */
  rawBody?: boolean;
  /** Optional request headers the route reads, for the OpenAPI document (name → description, string schema). */
  headers?: Record<string, { description: string; schema: JsonSchema }>;
  /**
   * With `?format=csv`, the handler's JSON answer is rendered by this as CSV (the query schema must declare
   * `format`). A handler that answers CSV itself (a stream or a string) is left alone.
   */
  csv?: (answer: unknown) => string;
  handler: (ctx: ApiContext<Q, B>) => Promise<void> | void;
}

/** The actor of a project route: the key's user in the resolved project. */
export const actorOf = (ctx: ApiContext): Actor => ({
  projectId: ctx.state.project.id,
  organizationId: ctx.state.project.organization_id,
  userId: ctx.state.auth.userId,
});

/** What a request schema validates to: the schema's own type when it is written out (`as const` or inline). */
export type Validated<S> = [S] extends [undefined]
  ? Record<string, any>
  : S extends JSONSchema
    ? FromSchema<S>
    : Record<string, any>;

/**
 * Declares a route; the handler's `ctx.state.query` and `ctx.state.body` are typed from the route's
 * query and body schemas (json-schema-to-ts), so a handler reads what its schema lets through.
 */
export function defineRoute<const QS = undefined, const BS = undefined>(
  route: Omit<RouteDefinition, 'query' | 'body' | 'handler'> & {
    query?: QS;
    body?: BS;
    handler: (ctx: ApiContext<Validated<QS>, Validated<BS>>) => Promise<void> | void;
  },
): RouteDefinition {
  return route as unknown as RouteDefinition;
}

/** Parses a JSON body as PostHog does (JSON only). An empty body is `{}`. */
async function jsonBody(ctx: Context, limitBytes: number): Promise<unknown> {
  const raw = await readRawBody(ctx, limitBytes);
  if (raw.length === 0) return {};
  const type = (ctx.get('content-type') || 'application/json').split(';')[0].trim().toLowerCase();
  if (type !== 'application/json' && !type.endsWith('+json') && type !== 'text/plain')
    throw unsupportedMediaType(ctx.get('content-type'));
  return parseJsonBody(raw);
}

function routeMiddleware(route: RouteDefinition): Mounted['serve'] {
  const hasBody = route.body !== undefined || (['POST', 'PATCH', 'PUT'].includes(route.method) && !route.rawBody);
  const projectRoute = route.path.includes(':project_id');
  return async (ctx, params) => {
    const apiCtx = ctx as ApiContext;
    const deps = apiCtx.deps;
    const em = deps.orm.em.fork() as EntityManager;
    apiCtx.state.em = em;
    apiCtx.state.params = params;
    const body = hasBody ? await jsonBody(ctx, deps.config.maxJsonBodyBytes) : undefined;
    if (route.scopes !== null) {
      const { key, project } = await authenticate(
        ctx,
        em,
        body,
        projectRoute ? apiCtx.state.params.project_id : undefined,
        deps.authCache,
      );
      apiCtx.state.auth = key;
      const throttleSettings = { ...deps.config.rateLimit, prefix: deps.config.redisPrefix };
      const throttle = await enforceThrottle(deps.redis, throttleSettings, key.keyId, deps.clock?.() ?? Date.now());
      if (throttle) {
        ctx.set('X-RateLimit-Limit', String(throttle.limit));
        ctx.set('X-RateLimit-Remaining', String(throttle.remaining));
        ctx.set('X-RateLimit-Reset', String(throttle.resetSeconds));
      }
      if (route.personalApiKeyAccess === false)
        throw permissionDenied('This action does not support Personal API Key access');
      requireScopes(key, route.scopes);
      if (projectRoute) apiCtx.state.project = await resolveProject(em, key, apiCtx.state.params.project_id, project);
    }
    const query = { ...ctx.query } as Record<string, unknown>;
    delete query.personal_api_key;
    if (!route.rawBody) {
      rejectUnstorableValues(query);
      rejectDeepJsonParameters(query);
      rejectUnstorableValues(body);
    }
    // DRF ignores an unusable limit/offset (falls back to the defaults) and takes a huge one as the
    // largest page, rather than refusing the request.
    for (const name of ['limit', 'offset']) {
      if (query[name] === undefined) continue;
      if (!/^\d+$/.test(String(query[name]))) delete query[name];
      else if (Number(query[name]) > Number.MAX_SAFE_INTEGER) query[name] = String(Number.MAX_SAFE_INTEGER);
    }
    apiCtx.state.query = route.query ? validate(route.query, query, { query: true }) : query;
    if (hasBody && body !== undefined) {
      if (body && typeof body === 'object' && !Array.isArray(body)) delete (body as any).personal_api_key;
      apiCtx.state.body = route.body ? validate(route.body, body) : body;
    }
    await route.handler(apiCtx);
    if (deps.config.validateResponses) checkResponseContract(route, ctx);
    if (route.csv && apiCtx.state.query.format === 'csv') answerCsv(ctx, route);
  };
}

const isJsonAnswer = (body: unknown): body is object =>
  body !== null && typeof body === 'object' && !Buffer.isBuffer(body) && typeof (body as any).pipe !== 'function';

/** The JSON answer as CSV; the next page, which CSV cannot carry, goes in a Link header as a CSV URL. */
function answerCsv(ctx: Context, route: RouteDefinition): void {
  const answer = ctx.body;
  if (!isJsonAnswer(answer) || ctx.status < 200 || ctx.status >= 300) return;
  const next = (answer as { next?: unknown }).next;
  ctx.body = route.csv!(answer);
  ctx.type = 'text/csv';
  const name = route.path
    .split('/')
    .filter((s) => s && !s.startsWith(':'))
    .at(-1);
  ctx.set('Content-Disposition', `attachment; filename="${name}.csv"`);
  if (typeof next === 'string' && URL.canParse(next)) {
    const url = new URL(next);
    url.searchParams.set('format', 'csv');
    ctx.set('Link', `<${url}>; rel="next"`);
  }
}

/** In tests: a response that contradicts the route's documented schema is a failure, not a silent drift. */
function checkResponseContract(route: RouteDefinition, ctx: Context): void {
  const documented = route.responses?.[ctx.status];
  if (!documented?.schema || (documented.contentType && documented.contentType !== 'application/json')) return;
  if (!isJsonAnswer(ctx.body)) return;
  const mismatch = responseMismatch(documented.schema, ctx.body);
  if (mismatch) {
    throw new ApiError(
      500,
      'server_error',
      'response_contract',
      `${route.method} ${route.path} ${ctx.status}: response does not match its documented schema: ${mismatch}`,
    );
  }
}

/** The routes mounted: `routes()` serves them; `hasPath()` says whether any method has a route there (405, not 404). */
export interface MountedRoutes {
  routes(): Middleware;
  hasPath(path: string): boolean;
}

interface Mounted {
  route: RouteDefinition;
  /** The path's segments: a literal, or a parameter's name after `:`. */
  segments: string[];
  /** Per segment 0 (literal) or 1 (parameter): routes sort by it, literal before parameter. */
  shape: string;
  methods: Set<string>;
  serve: (ctx: Context, params: Record<string, string>) => Promise<void>;
}

/**
 * Matches a request segment by segment against the routes with as many segments (a literal must be equal,
 * a parameter takes any non-empty segment). Where two routes match, the one with a literal where the other
 * has a parameter wins (`/persons/bulk_delete` over `/persons/:id`). A GET route also answers HEAD. This
 * replaced @koa/router, whose per-request dispatch (a regular expression per route, a middleware chain
 * composed per request) was a tenth of the API's CPU on a GET by id (bench/persons.ts).
 */
export function buildRouter(routes: RouteDefinition[]): MountedRoutes {
  const bySegmentCount = new Map<number, Mounted[]>();
  for (const route of routes) {
    // format=csv must show in validation and the OpenAPI document wherever it is honoured.
    if (route.csv && !(route.query?.properties as Record<string, unknown> | undefined)?.format)
      throw new Error(`${route.method} ${route.path} renders CSV but its query schema does not declare format`);
    const segments = route.path.split('/').slice(1);
    const shape = segments.map((segment) => (segment.startsWith(':') ? '1' : '0')).join('');
    const methods = new Set(route.method === 'GET' ? ['GET', 'HEAD'] : [route.method]);
    const sameLength = bySegmentCount.get(segments.length) ?? [];
    sameLength.push({ route, segments, shape, methods, serve: routeMiddleware(route) });
    bySegmentCount.set(segments.length, sameLength);
  }
  // Literal before parameter, position by position; otherwise in declaration order (the sort is stable).
  for (const list of bySegmentCount.values()) list.sort((a, b) => (a.shape < b.shape ? -1 : a.shape > b.shape ? 1 : 0));

  const paramsOf = (mounted: Mounted, parts: string[]): Record<string, string> | null => {
    const params: Record<string, string> = {};
    for (let i = 0; i < parts.length; i++) {
      const segment = mounted.segments[i];
      if (segment.charCodeAt(0) !== 58 /* : */) {
        if (segment !== parts[i]) return null;
      } else if (parts[i] === '') return null;
      else params[segment.slice(1)] = decodeSegment(parts[i]);
    }
    return params;
  };
  // `method` null: a route for any method.
  const find = (method: string | null, path: string) => {
    const parts = path.split('/').slice(1);
    for (const mounted of bySegmentCount.get(parts.length) ?? []) {
      if (method !== null && !mounted.methods.has(method)) continue;
      const params = paramsOf(mounted, parts);
      if (params) return { mounted, params };
    }
    return null;
  };

  return {
    hasPath: (path) => find(null, path) !== null,
    routes: () => (ctx, next) => {
      const found = find(ctx.method, ctx.path);
      if (!found) return next();
      ctx.state.routePath = found.mounted.route.path;
      return found.mounted.serve(ctx, found.params);
    },
  };
}

/** A path parameter percent-decoded; one that does not decode is taken as it came. */
function decodeSegment(segment: string): string {
  if (!segment.includes('%')) return segment;
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
}
