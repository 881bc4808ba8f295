// Signed webhooks per project: the rules of a webhook (its URL, secret and event types) and the one way
// any feature reports an event to them, queueWebhookEvent(s), which writes the delivery rows in the
// caller's transaction (an outbox: an event is never lost because Redis was down). Once that transaction
// has committed, the caller hands the returned ids to the queue (enqueueWebhookDeliveries in
// shared/platform/queues.ts); the worker's reconciler picks up any it could not.
import { randomBytes } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/postgresql';
import { Webhook } from 'standardwebhooks';
import { checkWebhookHost, PrivateAddressError } from './addresses.ts';
import * as store from './store.ts';

/** Every event a webhook can subscribe to. Add a feature's events here (experiments' guardrails next). */
export const WEBHOOK_EVENT_TYPES = [
  'deletion.queued',
  'deletion.running',
  'deletion.completed',
  'deletion.failed',
  'deletion.cancelled',
  'scrub.queued',
  'scrub.running',
  'scrub.completed',
  'scrub.failed',
  'scrub.cancelled',
  'experiment.guardrail_tripped',
] as const;
export type WebhookEventType = (typeof WEBHOOK_EVENT_TYPES)[number];

export const WEBHOOK_URL_MAX_LENGTH = 2048;
export const WEBHOOK_SECRET_MIN_LENGTH = 16;
export const WEBHOOK_SECRET_MAX_LENGTH = 200;

/** Bad input for a webhook: the message and the field (null: the request as a whole), for a 400. */
export class WebhookInputError extends Error {
  readonly attr: string | null;
  /**
   * PostHog's error code: `invalid` for a malformed value, `invalid_input` for a URL refused by policy,
   * `max_count` for one webhook too many.
   */
  readonly code: 'invalid' | 'invalid_input' | 'max_count';
  constructor(message: string, attr: string | null, code: WebhookInputError['code'] = 'invalid') {
    super(message);
    this.attr = attr;
    this.code = code;
  }
}

/** What the operator allows (config.webhooks). */
export interface WebhookPolicy {
  allowPrivateUrls: boolean;
  /** WEBHOOK_MAX_PER_PROJECT: how many webhooks a project may have. */
  maxPerProject: number;
}

/** The URL's host must not resolve to an address inside our network, unless the operator allows it. */
async function checkWebhookDestination(url: string, policy: WebhookPolicy): Promise<void> {
  try {
    await checkWebhookHost(url, policy.allowPrivateUrls);
  } catch (error) {
    if (error instanceof PrivateAddressError) throw new WebhookInputError(error.message, 'url', 'invalid_input');
    throw error;
  }
}

/** Only absolute http(s) URLs with a host: the worker posts to it. */
export function checkWebhookUrl(url: string): void {
  if (url.length > WEBHOOK_URL_MAX_LENGTH)
    throw new WebhookInputError(`Ensure this field has no more than ${WEBHOOK_URL_MAX_LENGTH} characters.`, 'url');
  const parsed = URL.canParse(url) ? new URL(url) : null;
  if (!parsed?.hostname) throw new WebhookInputError('Enter a valid URL.', 'url');
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:')
    throw new WebhookInputError('Enter a valid URL: only http and https URLs are accepted.', 'url');
  // fetch refuses them; a receiver authenticates a call by its signature.
  if (parsed.username || parsed.password)
    throw new WebhookInputError('Enter a valid URL: a user name or password in the URL is not accepted.', 'url');
}

function checkSecret(secret: string): void {
  if (secret.length < WEBHOOK_SECRET_MIN_LENGTH || secret.length > WEBHOOK_SECRET_MAX_LENGTH)
    throw new WebhookInputError(
      `The secret must be ${WEBHOOK_SECRET_MIN_LENGTH} to ${WEBHOOK_SECRET_MAX_LENGTH} characters long.`,
      'secret',
    );
  if (!/^[\x21-\x7e]+$/.test(secret))
    throw new WebhookInputError('The secret may hold printable ASCII characters only, no spaces.', 'secret');
  // whsec_ announces a Standard Webhooks secret: receivers' libraries base64-decode what follows.
  if (secret.startsWith('whsec_') && !standardKeyOf(secret))
    throw new WebhookInputError('A secret starting with whsec_ must continue in base64 (Standard Webhooks).', 'secret');
}

function checkEventTypes(types: string[]): string[] {
  if (types.length === 0) throw new WebhookInputError('Subscribe to at least one event type.', 'event_types');
  const unknown = types.find((t) => !(WEBHOOK_EVENT_TYPES as readonly string[]).includes(t));
  if (unknown !== undefined)
    throw new WebhookInputError(
      `"${unknown}" is not a valid choice: ${WEBHOOK_EVENT_TYPES.join(', ')}.`,
      'event_types',
    );
  return [...new Set(types)];
}

/**
 * A new secret: `whsec_` and 32 random bytes in hex. Hex is base64 too: Standard Webhooks libraries key
 * with its base64 decoding (48 bytes, within the spec's 24 to 64).
 */
export const generateWebhookSecret = () => `whsec_${randomBytes(32).toString('hex')}`;

/** `whsec_...abcd`: enough to tell secrets apart, never the secret. */
export const maskSecret = (secret: string) => `${secret.slice(0, secret.indexOf('_') + 1)}...${secret.slice(-4)}`;

export interface WebhookInput {
  url?: string;
  secret?: string;
  event_types?: string[];
  enabled?: boolean;
}

/**
 * Creates a webhook (every event type unless given, a generated secret unless given), unless the project
 * has policy.maxPerProject already.
 */
export async function createWebhook(
  em: EntityManager,
  projectId: number,
  createdById: number | null,
  input: WebhookInput,
  policy: WebhookPolicy,
): Promise<store.StoredWebhook> {
  if (input.url === undefined) throw new WebhookInputError('This field is required.', 'url');
  checkWebhookUrl(input.url);
  if (input.secret !== undefined) checkSecret(input.secret);
  await checkWebhookDestination(input.url, policy);
  const fields = {
    url: input.url,
    secret: input.secret ?? generateWebhookSecret(),
    eventTypes: checkEventTypes(input.event_types ?? [...WEBHOOK_EVENT_TYPES]),
    enabled: input.enabled ?? true,
  };
  return em.transactional(async (tx) => {
    if ((await store.countWebhooksLocked(tx as EntityManager, projectId)) >= policy.maxPerProject)
      throw new WebhookInputError(
        `A project may have at most ${policy.maxPerProject} webhooks: delete one to create another.`,
        null,
        'max_count',
      );
    return store.insertWebhook(tx as EntityManager, projectId, createdById, fields);
  });
}

/** Changes what is given; null when the project has no such webhook. */
export async function updateWebhook(
  em: EntityManager,
  projectId: number,
  id: number,
  input: WebhookInput,
  policy: WebhookPolicy,
): Promise<store.StoredWebhook | null> {
  if (input.url !== undefined) checkWebhookUrl(input.url);
  if (input.secret !== undefined) checkSecret(input.secret);
  if (input.url !== undefined) await checkWebhookDestination(input.url, policy);
  return store.updateWebhook(em, projectId, id, {
    url: input.url,
    secret: input.secret,
    eventTypes: input.event_types && checkEventTypes(input.event_types),
    enabled: input.enabled,
  });
}

/**
 * Reports an event to the project's enabled webhooks that receive its type: one pending delivery row per
 * webhook, in the caller's transaction. Returns the delivery ids, to hand to the queue after the commit.
 */
export function queueWebhookEvent(
  em: EntityManager,
  projectId: number,
  eventType: WebhookEventType,
  payload: Record<string, unknown>,
): Promise<string[]> {
  return queueWebhookEvents(em, projectId, eventType, () => [payload]);
}

/**
 * Several events of one type (a batch of deletion requests). `payloads` is called only when some webhook
 * receives the type, so a project without webhooks pays one index probe.
 */
export async function queueWebhookEvents(
  em: EntityManager,
  projectId: number,
  eventType: WebhookEventType,
  payloads: () => Record<string, unknown>[] | Promise<Record<string, unknown>[]>,
): Promise<string[]> {
  const webhookIds = await store.subscribedWebhookIds(em, projectId, eventType);
  if (webhookIds.length === 0) return [];
  return store.insertDeliveries(em, webhookIds, eventType, await payloads());
}

/** The body a delivery posts: the same bytes on every attempt. */
export function deliveryBody(delivery: store.DeliveryToSend): string {
  return JSON.stringify({
    id: delivery.id,
    type: delivery.event_type,
    created_at: new Date(delivery.created_at).toISOString(),
    project_id: delivery.project_id,
    data: delivery.payload,
  });
}

/** The Standard Webhooks signer of a secret it can read (whsec_ optional, then base64); null otherwise. */
function standardKeyOf(secret: string): Webhook | null {
  try {
    return new Webhook(secret);
  } catch {
    return null;
  }
}

/**
 * The Standard Webhooks headers of one attempt (webhook-id, webhook-timestamp, webhook-signature:
 * `v1,<base64 HMAC-SHA256 of "id.timestamp.body">`), signed by the standardwebhooks library itself, so
 * that its verify (`new Webhook(secret)`) accepts them. The key is the base64 decoding of the secret
 * (after whsec_); a secret of the customer's own that is not base64 is the key as it is, as the
 * library's `{ format: 'raw' }` reads it.
 */
export function webhookSignatureHeaders(secret: string, id: string, at: Date, body: string): Record<string, string> {
  const signer = standardKeyOf(secret) ?? new Webhook(secret, { format: 'raw' });
  return {
    'webhook-id': id,
    'webhook-timestamp': String(Math.floor(at.getTime() / 1000)),
    'webhook-signature': signer.sign(id, at, body),
  };
}
