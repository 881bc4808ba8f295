// A project's webhooks and their delivery log. The rules (URL, secret, event types) and the signing live
// in shared/webhooks/; a webhook's secret is answered once, by the create (or by the update that sets it).
import { isId } from '../../shared/platform/ids.ts';
import type { DeliveryView, StoredWebhook } from '../../shared/webhooks/index.ts';
import { findWebhook, listDeliveries, listWebhooks, deleteWebhook } from '../../shared/webhooks/index.ts';
import {
  createWebhook,
  maskSecret,
  updateWebhook,
  WEBHOOK_EVENT_TYPES,
  WEBHOOK_SECRET_MAX_LENGTH,
  WEBHOOK_URL_MAX_LENGTH,
  WebhookInputError,
} from '../../shared/webhooks/index.ts';
import { isoTimestamp } from '../../shared/platform/time.ts';
import { notFound, validationError } from '../http/errors.ts';
import { PAGE_QUERY_PROPERTIES, pageOf, paginated, paginatedSchema } from '../http/pagination.ts';
import { defineRoute, type ApiContext } from '../http/routes.ts';
import {
  dateTime,
  integerIdParam,
  nullableDateTime,
  nullableInteger,
  nullableString,
  openObject,
  record,
} from '../http/schemas.ts';

const P = '/api/projects/:project_id/webhooks';
const ID = integerIdParam('webhook');
const TAGS = ['webhooks'];

const webhookBody = {
  type: 'object',
  additionalProperties: false,
  properties: {
    url: { type: 'string', maxLength: WEBHOOK_URL_MAX_LENGTH, description: 'An http or https URL' },
    secret: {
      type: 'string',
      maxLength: WEBHOOK_SECRET_MAX_LENGTH,
      description:
        'The signing key (Standard Webhooks: whsec_ and base64; else 16–200 printable characters, the key as it is); generated when not given',
    },
    event_types: {
      type: 'array',
      items: { type: 'string', enum: [...WEBHOOK_EVENT_TYPES] },
      maxItems: 100,
      description: 'The events it receives (default: all)',
    },
    enabled: { type: 'boolean' },
  },
} as const;

const webhookSchema = record(
  {
    id: { type: 'integer' },
    url: { type: 'string' },
    event_types: { type: 'array', items: { type: 'string' } },
    enabled: { type: 'boolean' },
    secret_mask: { type: 'string', description: 'The start and the last 4 characters of the secret' },
    secret: { type: 'string', description: 'Only in the answer that sets it (create, or an update of the secret)' },
    created_at: dateTime,
  },
  { optional: ['secret'] },
);

const attemptSchema = record({
  at: dateTime,
  status_code: nullableInteger,
  error: nullableString,
  duration_ms: { type: 'integer' },
  response: { ...nullableString, description: 'The start of the answer (500 characters at most)' },
});

const deliverySchema = record({
  id: { type: 'string', description: 'Also the webhook-id header of every attempt' },
  event_type: { type: 'string' },
  payload: openObject('The event data, sent as `data` in the body'),
  status: { enum: ['pending', 'delivered', 'failed'] },
  attempts: { type: 'integer' },
  last_status_code: nullableInteger,
  last_error: nullableString,
  attempt_log: { type: 'array', items: attemptSchema, description: 'Every attempt, oldest first (the last 50)' },
  next_attempt_at: { ...nullableDateTime, description: 'A pending delivery is tried again by then' },
  delivered_at: nullableDateTime,
  created_at: dateTime,
});

const serialize = (webhook: StoredWebhook, withSecret = false) => ({
  id: webhook.id,
  url: webhook.url,
  event_types: webhook.eventTypes,
  enabled: webhook.enabled,
  secret_mask: maskSecret(webhook.secret),
  ...(withSecret ? { secret: webhook.secret } : {}),
  created_at: isoTimestamp(webhook.createdAt),
});

const serializeDelivery = (d: DeliveryView) => ({
  id: d.id,
  event_type: d.event_type,
  payload: d.payload,
  status: d.status,
  attempts: d.attempts,
  last_status_code: d.last_status_code,
  last_error: d.last_error,
  attempt_log: d.attempt_log,
  next_attempt_at: isoTimestamp(d.next_attempt_at),
  delivered_at: isoTimestamp(d.delivered_at),
  created_at: isoTimestamp(d.created_at),
});

/** The webhook of the path, in the request's project (a malformed id is an unknown one). */
async function find(ctx: ApiContext): Promise<StoredWebhook> {
  const id = ctx.state.params.id;
  const webhook = isId(id) ? await findWebhook(ctx.state.em, ctx.state.project.id, Number(id)) : null;
  if (!webhook) throw notFound();
  return webhook;
}

/** A rule of shared/webhooks broken: PostHog's 400. */
async function checked<T>(work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (error) {
    if (error instanceof WebhookInputError) throw validationError(error.message, error.attr, error.code);
    throw error;
  }
}

export const webhookRoutes = [
  defineRoute({
    method: 'GET',
    path: P,
    summary: "List the project's webhooks",
    tags: TAGS,
    scopes: ['project:read'],
    query: { type: 'object', properties: PAGE_QUERY_PROPERTIES },
    responses: { 200: { description: 'A page', schema: paginatedSchema(webhookSchema) } },
    handler: async function listProjectWebhooks(ctx) {
      const page = pageOf(ctx.state.query);
      const { count, rows } = await listWebhooks(ctx.state.em, ctx.state.project.id, page);
      ctx.body = paginated(
        ctx,
        page,
        count,
        rows.map((w) => serialize(w)),
      );
    },
  }),
  defineRoute({
    method: 'POST',
    path: P,
    summary: 'Create a webhook; the answer shows its secret, once',
    tags: TAGS,
    scopes: ['project:write'],
    body: webhookBody,
    responses: { 201: { description: 'Created, with its secret', schema: webhookSchema } },
    handler: async function createProjectWebhook(ctx) {
      const webhook = await checked(() =>
        createWebhook(
          ctx.state.em,
          ctx.state.project.id,
          ctx.state.auth.userId,
          ctx.state.body ?? {},
          ctx.deps.config.webhooks,
        ),
      );
      ctx.status = 201;
      ctx.body = serialize(webhook, true);
    },
  }),
  defineRoute({
    method: 'GET',
    path: `${P}/:id`,
    params: ID,
    summary: 'Retrieve a webhook',
    tags: TAGS,
    scopes: ['project:read'],
    responses: { 200: { description: 'Found', schema: webhookSchema } },
    handler: async function getProjectWebhook(ctx) {
      ctx.body = serialize(await find(ctx));
    },
  }),
  defineRoute({
    method: 'PATCH',
    path: `${P}/:id`,
    params: ID,
    summary: 'Update a webhook (a new secret is shown in this answer)',
    tags: TAGS,
    scopes: ['project:write'],
    body: webhookBody,
    responses: { 200: { description: 'Updated', schema: webhookSchema } },
    handler: async function updateProjectWebhook(ctx) {
      const existing = await find(ctx);
      const body = ctx.state.body ?? {};
      const webhook = await checked(() =>
        updateWebhook(ctx.state.em, ctx.state.project.id, existing.id, body, ctx.deps.config.webhooks),
      );
      if (!webhook) throw notFound();
      ctx.body = serialize(webhook, body.secret !== undefined);
    },
  }),
  defineRoute({
    method: 'DELETE',
    path: `${P}/:id`,
    params: ID,
    summary: 'Delete a webhook and its delivery log (pending deliveries are dropped)',
    tags: TAGS,
    scopes: ['project:write'],
    responses: { 204: { description: 'Deleted' } },
    handler: async function deleteProjectWebhook(ctx) {
      const existing = await find(ctx);
      if (!(await deleteWebhook(ctx.state.em, ctx.state.project.id, existing.id))) throw notFound();
      ctx.status = 204;
    },
  }),
  defineRoute({
    method: 'GET',
    path: `${P}/:id/deliveries`,
    params: ID,
    summary: "A webhook's delivery log, newest first, with every attempt",
    tags: TAGS,
    scopes: ['project:read'],
    query: { type: 'object', properties: PAGE_QUERY_PROPERTIES },
    responses: { 200: { description: 'A page of deliveries', schema: paginatedSchema(deliverySchema) } },
    handler: async function listWebhookDeliveries(ctx) {
      const webhook = await find(ctx);
      const page = pageOf(ctx.state.query);
      const { count, rows } = await listDeliveries(ctx.state.em, webhook.id, page);
      ctx.body = paginated(ctx, page, count, rows.map(serializeDelivery));
    },
  }),
];
