// One declaration per route: method, path, scopes and schemas in one place. The same list mounts
// the routes here and feeds the OpenAPI document.
import { Router, type RouterContext } from '@koa/router';
import type { EntityManager } from '@mikro-orm/postgresql';
import type { FromSchema, JSONSchema } from 'json-schema-to-ts';
import type { Context, Middleware } from 'koa';
import { authenticate, requireScopes, resolveProject, type AuthenticatedKey, type ProjectRow } from './auth.ts';
import { readRawBody } from './body.ts';
import { ApiError, notFound, permissionDenied, unsupportedMediaType } from './errors.ts';
import { isId } from '../../shared/platform/ids.ts';
import { parseJsonBody, rejectDeepJsonParameters, rejectUnstorableValues } from './json.ts';
import { enforceThrottle } from './throttle.ts';
import { recordPersonsRead } from './access-log.ts';
import {
  responseMismatch,
  UNDECLARED_MEMBER_NOTE,
  validate,
  withUndeclaredMembers,
  type JsonSchema,
} from './validation.ts';
import type { AppDeps } from '../deps.ts';
import type { Actor } from '../../shared/platform/activity-log.ts';

export type HttpMethod = 'GET' | 'POST' | 'PATCH' | 'PUT' | 'DELETE' | 'OPTIONS';

/**
 * A query or body no schema describes: members of unknown type, narrowed where read. (A body that is
 * not a JSON object has no members: reading one gives undefined.)
 */
export type Unvalidated = Record<string, unknown>;

export interface RouteState<Q = Unvalidated, B = Unvalidated | undefined> {
  em: EntityManager;
  auth: AuthenticatedKey;
  project: ProjectRow;
  query: Q;
  body: B;
  params: Record<string, string>;
}

export interface ApiContext<Q = Unvalidated, B = Unvalidated | undefined> extends Context {
  state: RouteState<Q, B> & Record<string, unknown>;
  deps: AppDeps;
}

/**
 * A declared route. Its handler is stored with the query and body unnarrowed (defineRoute() types it
 * from the route's schemas, which the middleware validates before calling it).
 */
export interface RouteDefinition<Q = Unvalidated, B = unknown> {
  method: HttpMethod;
  /** @koa/router path, without trailing slash; `:project_id` makes the route project-scoped. */
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
  /**
   * Body members the handler requires itself, answering PostHog's own 400 (validation would word it otherwise):
   * `required` in the OpenAPI document, not in validation.
   */
  requiredByHandler?: string[];
  /** Schemas of path parameters, for the OpenAPI document (`:project_id` and undeclared ones are strings). */
  params?: Record<string, JsonSchema>;
  /**
   * Documented response schema per status, for OpenAPI and the contract test. An error status without a
   * schema is documented with PostHog's error body unless `noBody` says the answer has none.
   */
  responses?: Record<
    number,
    {
      description: string;
      schema?: JsonSchema;
      contentType?: string;
      noBody?: true;
      /** An error's sample body in the reference, where the status's usual one would mislead. */
      example?: unknown;
    }
  >;
  /** The handler reads the body itself (capture's gzip / form / base64 payloads). */
  rawBody?: boolean;
  /**
   * The route deletes or stops work (every DELETE is, whatever this says): its query and body take only
   * what they declare, so a misspelt option (`dry_run[]`, `dryRun`) is a 400 naming it, never ignored.
   */
  destructive?: true;
  /** Optional request headers the route reads, for the OpenAPI document (name → description, string schema). */
  headers?: Record<string, { description: string; schema: JsonSchema }>;
  /**
   * With `?format=csv`, the handler's JSON answer is rendered by this as CSV (the query schema must declare
   * `format`). A handler that answers CSV itself (a stream or a string) is left alone.
   */
  csv?: (answer: unknown) => string;
  /**
   * The answer holds persons' data: each successful request is recorded in the read-access log as this
   * action, naming the persons the handler passed to `personsRead` (api/http/access-log.ts).
   */
  personAccess?: string;
  handler: (ctx: ApiContext<Q, B>) => Promise<void> | void;
}

/** The actor of a project route: the key's user in the resolved project. */
export const actorOf = (ctx: { state: Pick<RouteState, 'project' | 'auth'> }): Actor => ({
  projectId: ctx.state.project.id,
  organizationId: ctx.state.project.organization_id,
  userId: ctx.state.auth.userId,
  keyId: ctx.state.auth.keyId,
});

/** What a request schema validates to: the schema's own type when it is written out (`as const` or inline). */
export type Validated<S> = [S] extends [undefined] ? Unvalidated : S extends JSONSchema ? FromSchema<S> : Unvalidated;

/**
 * The context of a named handler, typed from the schemas its route declares as an inline handler is:
 * `async function update(ctx: RouteContext<typeof updateQuery, typeof updateBody>)` (`undefined` for none).
 */
export type RouteContext<QS = undefined, BS = undefined> = ApiContext<Validated<QS>, Validated<BS>>;

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
  // Sound: the middleware hands the handler only a query and body that the same schemas validated.
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

/** The route's handler behind authentication, throttling and validation; it ends the chain (no `next`). */
function routeMiddleware(route: RouteDefinition): Middleware {
  const closed = route.destructive === true || route.method === 'DELETE';
  const hasBody =
    route.body !== undefined || (['POST', 'PATCH', 'PUT'].includes(route.method) && !route.rawBody) || closed;
  const querySchema = closed ? closedRequestSchema(route.query) : route.query;
  const bodySchema = closed ? closedRequestSchema(route.body) : route.body;
  const projectRoute = route.path.includes(':project_id');
  const idChecks = idParamChecks(route);
  return async (ctx) => {
    const apiCtx = ctx as ApiContext<Unvalidated, unknown>;
    const deps = apiCtx.deps;
    ctx.state = Object.assign(new RequestState(deps.orm), ctx.state);
    ctx.state.routePath = route.path;
    const em = () => apiCtx.state.em;
    apiCtx.state.params = (ctx as RouterContext).params;
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
    // An id parameter its schema refuses names nothing here: PostHog's 404 (after authentication, as any 404).
    for (const [name, valid] of idChecks) if (!valid(apiCtx.state.params[name])) throw notFound();
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
    apiCtx.state.query = querySchema ? validate(querySchema, query, { query: true }) : query;
    if (hasBody && body !== undefined) {
      if (body && typeof body === 'object' && !Array.isArray(body)) Reflect.deleteProperty(body, 'personal_api_key');
      apiCtx.state.body = bodySchema ? validate(bodySchema, body) : body;
    }
    await route.handler(apiCtx);
    if (deps.config.validateResponses) checkResponseContract(route, ctx);
    if (route.csv && apiCtx.state.query.format === 'csv') answerCsv(ctx, route);
    if (route.personAccess && ctx.status >= 200 && ctx.status < 300) await recordPersonsRead(ctx, route.personAccess);
  };
}

/**
 * The checks of a route's id parameters, from their schemas: an integer id (`type: 'integer'`) by the one
 * id rule, a string id by its pattern (shared/platform/ids.ts). Other parameters (a person's id or uuid)
 * are the handler's to read.
 */
function idParamChecks(route: RouteDefinition): [string, (value: string | undefined) => boolean][] {
  return Object.entries(route.params ?? {}).flatMap(
    ([name, schema]): [string, (value: string | undefined) => boolean][] => {
      if (schema.type === 'integer') return [[name, (value) => isId(value)]];
      if (schema.type === 'string' && typeof schema.pattern === 'string') {
        const pattern = new RegExp(schema.pattern);
        return [[name, (value) => value !== undefined && pattern.test(value)]];
      }
      return [];
    },
  );
}

/**
 * A routed request's state. `em`: its EntityManager, forked from the ORM's when first read. A request
 * answered from the process's caches (/flags, a key seen before) never reads it: forking one for every
 * request was about 7% of the API's CPU on /flags. A handler may replace it (a transaction's).
 */
class RequestState {
  readonly #orm: AppDeps['orm'];
  #em: EntityManager | undefined;
  constructor(orm: AppDeps['orm']) {
    this.#orm = orm;
  }
  get em(): EntityManager {
    this.#em ??= this.#orm.em.fork();
    return this.#em;
  }
  set em(value: EntityManager) {
    this.#em = value;
  }
}

/**
 * A destructive route's query or body schema (none: nothing) where every object takes only the members
 * it declares; the 400 for another names it and says that nothing was done.
 */
function closedRequestSchema(schema: JsonSchema | undefined): JsonSchema {
  const closed = withUndeclaredMembers(schema ?? { type: 'object', properties: {} }, false) as JsonSchema;
  return {
    ...closed,
    [UNDECLARED_MEMBER_NOTE]:
      'This endpoint deletes or stops work: it takes only the parameters it documents, and nothing was done.',
  };
}

const isJsonAnswer = (body: unknown): body is object =>
  body !== null &&
  typeof body === 'object' &&
  !Buffer.isBuffer(body) &&
  !('pipe' in body && typeof body.pipe === 'function');

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

/** A route's path segments: 0 for a literal, 1 for a parameter (`/persons/bulk_delete` is `0001`). */
const shapeOf = (path: string) =>
  path
    .split('/')
    .slice(1)
    .map((segment) => (segment.startsWith(':') ? '1' : '0'))
    .join('');

/**
 * The routes on @koa/router. A GET route also answers HEAD; parameters are percent-decoded (one that does not
 * decode is kept as it came) and never empty. Where two routes match a path, the one with a literal where the
 * other has a parameter wins (`/persons/bulk_delete` over `/persons/:id`) whatever the declaration order: they
 * are registered sorted, literal before parameter position by position (otherwise in declaration order), and
 * a route's handler ends the chain, so the first route matched answers. A path such a literal route matches
 * is its own for every method: `GET /persons/bulk_delete` is a 405, not a person named `bulk_delete`.
 * `ctx.matched` then holds every route of the path whatever its method, for the Allow header of a 405 or an
 * OPTIONS (see allowedMethods); a 405 a route answers itself gets that header too.
 */
export function mountRoutes(routes: RouteDefinition[]): Router {
  const router = new Router({ sensitive: true });
  const shapes = new Map(routes.map((route) => [route, shapeOf(route.path)]));
  const ordered = routes.toSorted((a, b) => {
    const [x, y] = [shapes.get(a)!, shapes.get(b)!];
    return x < y ? -1 : x > y ? 1 : 0;
  });
  for (const route of ordered) {
    // format=csv must show in validation and the OpenAPI document wherever it is honoured.
    if (route.csv && !(route.query?.properties as Record<string, unknown> | undefined)?.format)
      throw new Error(`${route.method} ${route.path} renders CSV but its query schema does not declare format`);
    const middleware = routeMiddleware(route);
    const layer = router.register(route.path, [route.method], async (ctx, next) => {
      // A route with a literal where this one has a parameter owns the path: it answers, or the 405 after the router.
      if (!pathOwners(ctx).includes(layer)) return next();
      try {
        await middleware(ctx, next);
      } catch (error) {
        if (error instanceof ApiError && error.status === 405) ctx.set('Allow', allowedMethods(ctx).join(', '));
        throw error;
      }
      if (ctx.status === 405) ctx.set('Allow', allowedMethods(ctx).join(', '));
    }) as Layer;
    mounted.set(layer, { route, shape: shapes.get(route)! });
  }
  // The router tries every route's pattern on every request (4% of the API's CPU on /flags). Where every
  // segment of every route is a literal or a :parameter (which never spans a '/'), only the routes with as
  // many segments as the path can match it: those are tried, in the router's order, by its own match. What
  // it finds for a declared path without parameters (/flags, /decide, /e…) is found once per method and kept.
  const segmentsOf = (path: string) => {
    let end = path.length;
    while (end > 0 && path.charCodeAt(end - 1) === 47) end--; // trailing '/'s
    let segments = 1;
    for (let i = 0; i < end; i++) if (path.charCodeAt(i) === 47) segments++;
    return segments;
  };
  const bySegments = new Map<number, Router['stack']>();
  for (const layer of router.stack) {
    const n = segmentsOf(layer.path as string);
    bySegments.set(n, [...(bySegments.get(n) ?? []), layer]);
  }
  const plainPaths = routes.every((route) => /^(\/:?[\w.@-]+)+$/.test(route.path));
  const matchEveryRoute = router.match.bind(router);
  const matchAmong = !plainPaths
    ? matchEveryRoute
    : (path: string, method: string) =>
        Router.prototype.match.call({ stack: bySegments.get(segmentsOf(path)) ?? [] } as Router, path, method);
  const literalPaths = new Set(routes.filter((route) => !route.path.includes(':')).map((route) => route.path));
  const matchedLiterals = new Map<string, ReturnType<Router['match']>>();
  router.match = (path, method) => {
    if (!literalPaths.has(path)) return matchAmong(path, method);
    const key = `${method} ${path}`;
    let found = matchedLiterals.get(key);
    if (!found) {
      found = matchAmong(path, method);
      matchedLiterals.set(key, found);
    }
    // Copies: the router keeps the arrays on the request's context.
    return { path: [...found.path], pathAndMethod: [...found.pathAndMethod], route: found.route };
  };
  return router;
}

type Layer = NonNullable<RouterContext['matched']>[number];
/** Each mounted layer's route and its shape. */
const mounted = new WeakMap<Layer, { route: RouteDefinition; shape: string }>();

/**
 * The routes of the request's path that own it: of ours it matches (whatever their method), the ones with
 * the most literal shape (shapes of one path have one length; '0' sorts before '1'); another router's all.
 */
function pathOwners(ctx: Context): Layer[] {
  const matched = (ctx as RouterContext).matched ?? [];
  const shapeOfLayer = (layer: Layer) => mounted.get(layer)?.shape ?? '';
  const shape = matched.reduce((min, layer) => {
    const own = shapeOfLayer(layer);
    return own && own < min ? own : min;
  }, '2');
  return matched.filter((layer) => !mounted.has(layer) || shapeOfLayer(layer) === shape);
}

/** A route declared only to answer 405 (hard-deleting an experiment, creating a person): its method is not allowed. */
const alwaysRefused = (route: RouteDefinition) => {
  const statuses = Object.keys(route.responses ?? {});
  return statuses.length > 0 && statuses.every((status) => status === '405');
};

/**
 * The methods the request's path allows whatever its method, once the router has seen it (HEAD with GET): those
 * of the routes that own it, but for routes that always answer 405.
 */
export function allowedMethods(ctx: Context): string[] {
  const allowed = new Set<string>();
  for (const layer of pathOwners(ctx)) {
    const route = mounted.get(layer)?.route;
    if (!route || !alwaysRefused(route)) for (const method of layer.methods) allowed.add(method);
  }
  return [...allowed];
}
