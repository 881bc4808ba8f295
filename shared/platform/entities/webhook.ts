import { defineEntity, p, type InferEntity } from '@mikro-orm/core';
import { Project } from './project.ts';
import { User } from './user.ts';

/** A customer's endpoint for a project's events (shared/webhooks/): the event types it receives, signed with its secret. */
export const Webhook = defineEntity({
  name: 'Webhook',
  tableName: 'webhook',
  properties: {
    id: p.integer().primary().autoincrement(),
    projectId: () => p.manyToOne(Project).mapToPk().fieldName('project_id').deleteRule('cascade'),
    url: p.string().length(2048),
    /** The key of the Standard Webhooks signature (webhook-signature); shown once when the webhook is created. */
    secret: p.string().length(200),
    eventTypes: p.array(),
    enabled: p.boolean().default(true),
    createdById: () => p.manyToOne(User).mapToPk().nullable().fieldName('created_by_id').deleteRule('set null'),
    createdAt: p.datetime().defaultRaw('now()'),
  },
  indexes: [{ name: 'webhook_project_idx', properties: ['projectId'] }],
});

/**
 * One event for one webhook: the outbox row written in the transaction of the change it reports, and
 * the delivery log (every attempt in `attemptLog`). pending → delivered | failed.
 */
export const WebhookDelivery = defineEntity({
  name: 'WebhookDelivery',
  tableName: 'webhook_delivery',
  properties: {
    id: p.bigint('string').primary().autoincrement(),
    webhookId: () => p.manyToOne(Webhook).mapToPk().fieldName('webhook_id').deleteRule('cascade'),
    eventType: p.string().length(100),
    payload: p.json<Record<string, unknown>>(),
    status: p.string().length(20).default('pending'),
    attempts: p.integer().default(0),
    lastStatusCode: p.integer().nullable(),
    lastError: p.text().nullable(),
    /** [{at, status_code, error, duration_ms, response}], one per attempt. */
    attemptLog: p.json<Record<string, unknown>[]>().defaultRaw(`'[]'`),
    nextAttemptAt: p.datetime().nullable(),
    deliveredAt: p.datetime().nullable(),
    createdAt: p.datetime().defaultRaw('now()'),
  },
  indexes: [
    // Read backwards for the log, newest first.
    { name: 'webhook_delivery_webhook_idx', properties: ['webhookId', 'id'] },
    { name: 'webhook_delivery_pending_idx', properties: ['id'], where: `status = 'pending'` },
    { name: 'webhook_delivery_created_idx', properties: ['createdAt'] },
  ],
});

export type WebhookRow = InferEntity<typeof Webhook>;
export type WebhookDeliveryRow = InferEntity<typeof WebhookDelivery>;
