// What the endpoints that create deletion work share (DELETE person, delete_events,
// delete_recordings, bulk_delete): the Idempotency-Key header, dry_run and suppress. And the deletion
// request's own routes beside deletion_status: cancel and unsuppress. The rules are in shared/deletions/service.ts.
import { BIGINT_ID_PATTERN } from '../../shared/platform/ids.ts';
import type { EntityManager } from '@mikro-orm/postgresql';
import { ApiError, conflict, notFound, validationError } from '../http/errors.ts';
import { actorOf, defineRoute, type ApiContext } from '../http/routes.ts';
import type { PersonWithIds } from './serializers.ts';
import {
  answerOnce,
  cancelDeletion,
  enqueueAfterDeletions,
  IDEMPOTENCY_KEY_MAX_LENGTH,
  idempotencyKey,
  previewPersonDeletions,
  recordPersonDeletions,
  unsuppressDeletion,
  type DeletionOptions,
} from '../../shared/deletions/index.ts';
import type { DeletionRequestView } from '../../shared/deletions/index.ts';

const NULLABLE_TIME = { type: ['string', 'null'], format: 'date-time' };

/** A deletion request's id as the API answers it (a bigint, as a string) and takes it in paths, everywhere alike. */
export const DELETION_REQUEST_ID = {
  type: 'string',
  pattern: BIGINT_ID_PATTERN,
  description: "The deletion request's id",
} as const;
export const deletionRequestSchema = {
  type: 'object',
  required: [
    'id',
    'person_uuid',
    'deletion_type',
    'mode',
    'status',
    'created_at',
    'cutoff',
    'attempts',
    'failures',
    'last_error',
    'next_attempt_at',
    'started_at',
    'delete_verified_at',
    'cancelled_at',
    'suppression',
    'suppressed_events',
  ],
  properties: {
    id: DELETION_REQUEST_ID,
    project_id: { type: 'integer' },
    person_uuid: { type: 'string' },
    deletion_type: { enum: ['person_events', 'person_recordings'] },
    mode: { enum: ['weekly', 'off_peak', 'immediate'] },
    status: { enum: ['pending', 'running', 'completed', 'failed', 'cancelled'] },
    created_at: NULLABLE_TIME,
    cutoff: { ...NULLABLE_TIME, description: 'Only data up to this moment is deleted; a repeated request moves it' },
    attempts: { type: 'integer', description: 'Worker attempts so far' },
    failures: {
      type: 'integer',
      description: 'Times it failed finally; each is retried automatically at next_attempt_at',
    },
    last_error: { type: ['string', 'null'] },
    next_attempt_at: { ...NULLABLE_TIME, description: 'When a failed request is tried again' },
    started_at: NULLABLE_TIME,
    delete_verified_at: NULLABLE_TIME,
    cancelled_at: { ...NULLABLE_TIME, description: 'When it was cancelled (status cancelled)' },
    suppression: {
      enum: ['active', 'lifted', null],
      description:
        "suppress=true: 'active' while capture drops the person's distinct ids' events, 'lifted' after unsuppress; null without suppression",
    },
    suppressed_events: {
      type: 'integer',
      minimum: 0,
      description: 'Events capture dropped because of its suppression',
    },
  },
};

const windowSchema = {
  type: ['object', 'null'],
  required: ['mode', 'starts_at'],
  properties: {
    mode: { enum: ['weekly', 'off_peak', 'immediate'] },
    starts_at: { type: 'string', format: 'date-time', description: "The window's next opening (immediate: now)" },
  },
};
const count = { type: 'integer', minimum: 0 };
export const dryRunSchema = {
  type: 'object',
  description: 'dry_run=true: what the request would delete now, per store, and when; nothing is changed',
  required: ['dry_run', 'persons_found', 'would_delete', 'windows'],
  properties: {
    dry_run: { const: true },
    persons_found: count,
    would_delete: {
      type: 'object',
      required: ['persons', 'distinct_ids', 'events', 'recordings'],
      properties: { persons: count, distinct_ids: count, events: count, recordings: count },
    },
    windows: {
      type: 'object',
      required: ['events', 'recordings'],
      properties: { events: windowSchema, recordings: windowSchema },
    },
  },
};

const IDEMPOTENCY_HEADER = 'Idempotency-Key';

/** What an endpoint that creates deletion work declares beside its own: the header and its answers. */
export const deletionWork = {
  headers: {
    [IDEMPOTENCY_HEADER]: {
      description:
        'Any text up to 255 characters, per user: a retry with the same key answers the first answer (header Idempotent-Replayed: true) and creates nothing new, for 24 hours; the same key with another request is 422',
      schema: { type: 'string', minLength: 1, maxLength: IDEMPOTENCY_KEY_MAX_LENGTH },
    },
  },
  responses: {
    422: { description: 'The Idempotency-Key was used with a different request in the last 24 hours' },
  },
};

const DRY_RUN_PARAM = {
  type: 'boolean',
  description:
    'Answer what would be deleted (per-store counts and the windows) and change nothing; only with the parameters listed here',
} as const;

export const SUPPRESS_PARAM = {
  type: 'boolean',
  description:
    "Also suppress the persons' distinct ids: capture drops their later events (counted in the request's suppressed_events) until POST …/deletion_status/{id}/unsuppress/. Needs delete_events or delete_recordings; not with dry_run. Default: a new event makes a new person, as in PostHog",
} as const;

/**
 * The query of an endpoint that creates deletion work, with `dry_run` and `suppress`. Such a route is
 * destructive (defineRoute's `destructive`): any parameter not declared here is a 400, so a misspelt
 * dry run never deletes; dry_run with suppress=true is a 400 too (a dry run changes nothing, so it
 * cannot suppress).
 */
export function deletionQuery<const P extends Record<string, unknown>>(properties: P) {
  return { type: 'object' as const, properties: { suppress: SUPPRESS_PARAM, ...properties, dry_run: DRY_RUN_PARAM } };
}

/** The user's Idempotency-Key, fingerprinted with what the request asks (format aside), or null without one. */
export function idempotencyKeyOf(ctx: ApiContext, action: string) {
  const raw = ctx.get(IDEMPOTENCY_HEADER);
  if (ctx.headers['idempotency-key'] === undefined) return null;
  if (raw.trim() === '') throw validationError('This field may not be blank.', IDEMPOTENCY_HEADER, 'blank');
  if (raw.length > IDEMPOTENCY_KEY_MAX_LENGTH)
    throw validationError(
      `Ensure this field has no more than ${IDEMPOTENCY_KEY_MAX_LENGTH} characters.`,
      IDEMPOTENCY_HEADER,
      'max_length',
    );
  const { format: _format, ...query } = ctx.state.query;
  return idempotencyKey(ctx.state.auth.userId, raw, {
    action,
    id: ctx.state.params.id ?? null,
    query,
    body: ctx.state.body ?? null,
  });
}

/** The 422 of an Idempotency-Key used with a different request. */
export const keyReused = () =>
  new ApiError(
    422,
    'invalid_request',
    'idempotency_key_reused',
    `This ${IDEMPOTENCY_HEADER} was already used with a different request in the last 24 hours; use a new key.`,
    IDEMPOTENCY_HEADER,
  );

/**
 * Answers a request that creates deletion work: a dry run (dry_run=true) answers what would be
 * deleted; otherwise the persons are deleted and the requests recorded in one transaction, under the
 * Idempotency-Key when there is one (a retry answers the first answer, header Idempotent-Replayed).
 */
export async function answerDeletionRequest(
  ctx: ApiContext,
  action: string,
  options: DeletionOptions & { dryRun: boolean },
  findPersons: (em: EntityManager) => Promise<PersonWithIds[]>,
  answer: (
    persons: PersonWithIds[],
    done: { personsDeleted: number; requests: DeletionRequestView[] },
  ) => { status: number; body: unknown },
): Promise<void> {
  const key = idempotencyKeyOf(ctx, action);
  const projectId = ctx.state.project.id;
  if (options.suppress && options.dryRun)
    throw validationError(
      'dry_run cannot be combined with suppress: a dry run changes nothing. Make the request without dry_run to suppress.',
      'suppress',
    );
  if (options.suppress && !options.deleteEvents && !options.deleteRecordings)
    throw validationError(
      'suppress needs delete_events or delete_recordings: the suppression belongs to that deletion request.',
      'suppress',
    );
  if (options.dryRun) {
    const persons = await findPersons(ctx.state.em);
    ctx.body = await previewPersonDeletions(
      ctx.state.em,
      ctx.deps.events,
      ctx.deps.config,
      projectId,
      persons,
      options,
    );
    return;
  }
  const result = await answerOnce(ctx.state.em, projectId, key, async (tx) => {
    const persons = await findPersons(tx);
    const done = await recordPersonDeletions(tx, actorOf(ctx), persons, options);
    return {
      answer: answer(persons, done),
      afterCommit: () => {
        // This process sees its own suppression at once; the others on its notification.
        if (options.suppress) ctx.deps.suppressionCache?.invalidate(new Set([projectId]));
        return enqueueAfterDeletions(ctx.deps.queues, done);
      },
    };
  });
  if (result === 'key_reused') throw keyReused();
  if (result.replayed) ctx.set('Idempotent-Replayed', 'true');
  if (result.body !== null && result.body !== undefined) ctx.body = result.body;
  ctx.status = result.status;
}

const P = '/api/projects/:project_id/persons';

/** Cancel, by POST …/cancel/ or DELETE on the request. */
const cancelRoute = (method: 'POST' | 'DELETE', path: string) =>
  defineRoute({
    method,
    path,
    params: { id: DELETION_REQUEST_ID },
    summary:
      'Cancel a pending deletion request (before a worker has claimed it); 409 once claimed, completed or failed',
    tags: ['persons'],
    scopes: ['person:write'],
    destructive: true,
    responses: {
      200: { description: 'The cancelled request', schema: deletionRequestSchema },
      404: { description: 'No such request in this project' },
      409: { description: 'Too late: a worker has claimed it (running), or it completed or failed' },
    },
    handler: async (ctx) => {
      const id = ctx.state.params.id;
      const result = await cancelDeletion(ctx.state.em, actorOf(ctx), id, ctx.deps.queues);
      if (!result) throw notFound();
      if (result.outcome === 'too_late')
        throw conflict(`Deletion request ${id} is ${result.request.status}; only a pending request can be cancelled.`);
      ctx.body = result.request;
    },
  });

export const deletionRequestRoutes = [
  cancelRoute('POST', `${P}/deletion_status/:id/cancel`),
  cancelRoute('DELETE', `${P}/deletion_status/:id`),
  defineRoute({
    method: 'POST',
    path: `${P}/deletion_status/:id/unsuppress`,
    params: { id: DELETION_REQUEST_ID },
    summary:
      "Lift a request's suppression (suppress=true): capture stores its distinct ids' events again, and a new event makes a new person",
    tags: ['persons'],
    scopes: ['person:write'],
    destructive: true,
    responses: {
      200: { description: 'The request, suppression lifted (again: the same answer)', schema: deletionRequestSchema },
      404: { description: 'No such request in this project' },
      409: { description: 'The request suppressed nothing (it was made without suppress=true)' },
    },
    handler: async (ctx) => {
      const id = ctx.state.params.id;
      const result = await unsuppressDeletion(ctx.state.em, actorOf(ctx), id);
      if (result === 'not_found') throw notFound();
      if (result === 'not_suppressed')
        throw conflict(
          `Deletion request ${id} suppressed nothing; only a request made with suppress=true can be unsuppressed.`,
        );
      ctx.deps.suppressionCache?.invalidate(new Set([ctx.state.project.id]));
      ctx.body = result;
    },
  }),
];
