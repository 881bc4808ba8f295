// The endpoints SDKs send events to: /e, /i/v0/e, /capture, /track, /engage, /batch, /s.
// Authenticated by the project API token in the payload; CORS open, as PostHog's are.
import type { Context, Middleware } from 'koa';
import { readRawBody } from '../http/body.ts';
import { invalidProjectToken } from '../http/project-token.ts';
import { defineRoute, type RouteContext } from '../http/routes.ts';
import { ingestEvents } from '../../shared/ingestion/index.ts';
import { recordWarnings } from '../../shared/ingestion/index.ts';
import { ApiError } from '../http/errors.ts';
import { countDropped, directLookup, dropSuppressed } from '../../shared/deletions/index.ts';
import { logger } from '../../shared/platform/logger.ts';
import { decodeSdkPayload } from './decode.ts';
import { eventsOf, requestOf } from './events.ts';
import { projectIdByApiToken } from './project-cache.ts';
import { planOf } from '../tracking-plan/cache.ts';
import { enforceAtCapture } from '../../shared/tracking-plan/index.ts';

const MB = 1024 * 1024;

const eventTooBig = (limitBytes: number) =>
  new ApiError(
    413,
    'invalid_request',
    'event_too_big',
    `An event is larger than the limit of ${limitBytes} bytes (PostHog's per-event limit); nothing of the request was stored.`,
  );

export function sdkCors(ctx: Context): void {
  ctx.set('Access-Control-Allow-Origin', ctx.get('origin') || '*');
  ctx.set('Access-Control-Allow-Credentials', 'true');
  ctx.set('Access-Control-Allow-Headers', ctx.get('access-control-request-headers') || 'Content-Type');
  ctx.set('Access-Control-Allow-Methods', 'GET, POST, OPTIONS');
  ctx.vary('Origin'); // the allowed origin is the caller's: a shared cache must not serve it to another
}

/** Paths browsers' SDKs call: capture, flags, and the remote config under /array/. */
export function isSdkPath(path: string): boolean {
  return SDK_PATHS.has(path) || path.startsWith('/array/');
}

/**
 * Sets SDK CORS before routing, so every answer of an SDK path carries it: errors thrown before or
 * in a handler, 404 and 405 included. Without it the browser hides the error from the SDK.
 */
export const sdkCorsOnEveryAnswer: Middleware = async (ctx, next) => {
  if (isSdkPath(ctx.path)) sdkCors(ctx);
  await next();
};

async function capture(ctx: RouteContext, options: { limitBytes: number; legacy: boolean; engage: boolean }) {
  const raw = ctx.method === 'POST' ? await readRawBody(ctx, options.limitBytes) : Buffer.alloc(0);
  const payload = await decodeSdkPayload(ctx, raw, options.limitBytes, options.legacy);
  const request = requestOf(payload, { engagePath: options.engage });
  // The process's EntityManager, not a fork per request (the route's em is forked only if read): every
  // statement here is Kysely's, bound to no identity map, and ingestEvents' transaction forks its own.
  const em = ctx.deps.orm.em;
  const projectId = await projectIdByApiToken(em, ctx.deps.projectCache, request.token);
  const maxEventBytes = ctx.deps.config.maxEventBytes;
  const { events, warnings, oversized } = eventsOf(request, {
    querySentAt: ctx.query._ as string | undefined,
    maxEventBytes,
  });
  if (oversized.length > 0) {
    // PostHog's sink refuses the event (EventTooBig): 413, with a warning the project sees.
    await recordWarnings(em, projectId, oversized);
    throw eventTooBig(maxEventBytes);
  }
  const lookup = ctx.deps.suppressionCache ?? directLookup;
  const suppressed = await dropSuppressed(em, lookup, projectId, events);
  // The project's tracking plan (null for most: from memory, nothing else to do).
  const plan = await planOf(em, ctx.deps.planCache, projectId);
  const enforced = plan === null ? null : await enforceAtCapture(em, projectId, plan, suppressed.kept);
  const kept = enforced?.kept ?? suppressed.kept;
  const allWarnings = [...warnings, ...suppressed.warnings];
  if (enforced) allWarnings.push(...enforced.warnings);
  await ingestEvents(em, projectId, kept, allWarnings);
  ctx.metrics.eventsIngested.inc(kept.length);
  if (enforced && enforced.outcomes.size > 0) {
    for (const [outcome, n] of enforced.outcomes) ctx.metrics.planOutcomes.inc({ outcome }, n);
    for (const [kind, n] of enforced.kinds) ctx.metrics.planViolations.inc({ kind }, n);
    // After the commit: a statistic, as the suppression counts below.
    await enforced
      .count(em)
      .catch((error: unknown) =>
        logger.warn({ err: (error as Error).message, projectId }, 'tracking plan violations not counted'),
      );
  }
  if (suppressed.droppedTotal > 0) {
    ctx.metrics.eventsSuppressed.inc(suppressed.droppedTotal);
    // After the commit: a statistic; failing to count must not fail (and so repeat) the request.
    await countDropped(em, suppressed.dropped).catch((error: unknown) =>
      logger.warn({ err: (error as Error).message, projectId }, 'suppressed events not counted'),
    );
  }
  if (ctx.query.beacon === '1') {
    ctx.status = 204;
    return;
  }
  ctx.body = { status: 1 };
}

const successSchema = { type: 'object', required: ['status'], properties: { status: { type: 'integer' } } };

const ENDPOINTS: { path: string; limitBytes: number; legacy: boolean; engage: boolean; summary: string }[] = [
  {
    path: '/batch',
    limitBytes: 20 * MB,
    legacy: false,
    engage: false,
    summary: 'Capture a batch of events (posthog-node, posthog-js)',
  },
  { path: '/e', limitBytes: 2 * MB, legacy: true, engage: false, summary: 'Capture events' },
  { path: '/i/v0/e', limitBytes: 2 * MB, legacy: false, engage: false, summary: 'Capture events' },
  { path: '/capture', limitBytes: 2 * MB, legacy: true, engage: false, summary: 'Capture events' },
  { path: '/track', limitBytes: 2 * MB, legacy: true, engage: false, summary: 'Capture events' },
  {
    path: '/engage',
    limitBytes: 2 * MB,
    legacy: true,
    engage: true,
    summary: 'Set person properties (engage payload becomes $identify)',
  },
  { path: '/s', limitBytes: 20 * MB, legacy: false, engage: false, summary: 'Capture session recording snapshots' },
];

const SDK_PATHS = new Set([...ENDPOINTS.map((e) => e.path), '/flags', '/decide']);

/** CORS preflight for an SDK endpoint (browsers ask before posting JSON). */
export const sdkPreflight = (path: string) =>
  defineRoute({
    method: 'OPTIONS',
    path,
    summary: 'CORS preflight',
    tags: ['capture'],
    scopes: null,
    rawBody: true,
    responses: { 204: { description: 'CORS headers' } },
    handler: (ctx) => {
      ctx.status = 204; // the CORS headers come from sdkCorsOnEveryAnswer
    },
  });

export const captureRoutes = ENDPOINTS.flatMap((endpoint) => [
  sdkPreflight(endpoint.path),
  ...(['POST', 'GET'] as const).map((method) =>
    defineRoute({
      method,
      path: endpoint.path,
      summary: endpoint.summary,
      tags: ['capture'],
      scopes: null,
      rawBody: true,
      responses: {
        200: {
          description:
            'Committed: every event stored, except those dropped or altered with an ingestion warning (see ingestion_warnings)',
          schema: successSchema,
        },
        401: { description: 'Missing or invalid project API key', example: invalidProjectToken().body },
        413: {
          description:
            'The body, decoded, is larger than the endpoint allows; or an event is larger than MAX_EVENT_BYTES (nothing stored, a message_size_too_large warning)',
        },
        503: { description: "The process's decoding budget is in use: try again after Retry-After" },
      },
      handler: (ctx) => capture(ctx, endpoint),
    }),
  ),
]);
