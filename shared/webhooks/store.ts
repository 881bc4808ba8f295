// Webhooks and their deliveries: every statement on `webhook` and `webhook_delivery` lives here, through
// the entities' Kysely (db(em)). A delivery row is an outbox row, inserted in the caller's transaction;
// its BullMQ job carries only its id.
import type { EntityManager } from '@mikro-orm/postgresql';
import { type InferResult, sql } from 'kysely';
import { db } from '../platform/db/kysely.ts';
import { type Page, type PageResult, pagedSelect } from '../platform/db/paged.ts';

export interface WebhookFields {
  url: string;
  secret: string;
  eventTypes: string[];
  enabled: boolean;
}

// A webhook as the service and routes use it (camelCase, as WebhookFields).
const WEBHOOK_COLUMNS = [
  'id',
  'project_id as projectId',
  'url',
  'secret',
  'event_types as eventTypes',
  'enabled',
  'created_by_id as createdById',
  'created_at as createdAt',
] as const;

const selectWebhooks = (em: EntityManager) => db(em).selectFrom('webhook').select(WEBHOOK_COLUMNS);

export type StoredWebhook = InferResult<ReturnType<typeof selectWebhooks>>[number];

export async function insertWebhook(
  em: EntityManager,
  projectId: number,
  createdById: number | null,
  fields: WebhookFields,
): Promise<StoredWebhook> {
  return db(em)
    .insertInto('webhook')
    .values({
      project_id: projectId,
      created_by_id: createdById,
      url: fields.url,
      secret: fields.secret,
      event_types: fields.eventTypes,
      enabled: fields.enabled,
    })
    .returning(WEBHOOK_COLUMNS)
    .executeTakeFirstOrThrow();
}

/**
 * How many webhooks the project has, counted under a lock of the caller's transaction that concurrent
 * creates of the same project wait for (so that a cap checked against it holds).
 */
export async function countWebhooksLocked(em: EntityManager, projectId: number): Promise<number> {
  await sql`select pg_advisory_xact_lock(hashtext('webhook_create'), ${projectId}::int)`.execute(db(em));
  const { n } = await db(em)
    .selectFrom('webhook')
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .where('project_id', '=', projectId)
    .executeTakeFirstOrThrow();
  return Number(n);
}

export async function findWebhook(em: EntityManager, projectId: number, id: number): Promise<StoredWebhook | null> {
  const row = await selectWebhooks(em).where('project_id', '=', projectId).where('id', '=', id).executeTakeFirst();
  return row ?? null;
}

/** A project's webhooks, oldest first. */
export function listWebhooks(em: EntityManager, projectId: number, page: Page): Promise<PageResult<StoredWebhook>> {
  return pagedSelect(em, selectWebhooks(em).where('project_id', '=', projectId).orderBy('id'), page);
}

/** Sets the given fields; answers the webhook after, or null when the project has no such webhook. */
export async function updateWebhook(
  em: EntityManager,
  projectId: number,
  id: number,
  fields: Partial<WebhookFields>,
): Promise<StoredWebhook | null> {
  const changes = {
    url: fields.url,
    secret: fields.secret,
    event_types: fields.eventTypes,
    enabled: fields.enabled,
  };
  if (Object.values(changes).every((value) => value === undefined)) return findWebhook(em, projectId, id);
  const row = await db(em)
    .updateTable('webhook')
    .set(changes)
    .where('project_id', '=', projectId)
    .where('id', '=', id)
    .returning(WEBHOOK_COLUMNS)
    .executeTakeFirst();
  return row ?? null;
}

/** Deletes the webhook and its delivery log; false when the project has no such webhook. */
export async function deleteWebhook(em: EntityManager, projectId: number, id: number): Promise<boolean> {
  const { numDeletedRows } = await db(em)
    .deleteFrom('webhook')
    .where('project_id', '=', projectId)
    .where('id', '=', id)
    .executeTakeFirst();
  return numDeletedRows > 0n;
}

/** The project's enabled webhooks that receive `eventType` (an index probe: cheap when there are none). */
export async function subscribedWebhookIds(em: EntityManager, projectId: number, eventType: string): Promise<number[]> {
  const found = await db(em)
    .selectFrom('webhook')
    .select('id')
    .where('project_id', '=', projectId)
    .where('enabled', '=', true)
    .where((eb) => eb(eb.val(eventType), '=', eb.fn.any('event_types')))
    .orderBy('id')
    .execute();
  return found.map((r) => r.id);
}

/** One delivery row per webhook and payload, pending; returns their ids. */
export async function insertDeliveries(
  em: EntityManager,
  webhookIds: number[],
  eventType: string,
  payloads: Record<string, unknown>[],
): Promise<string[]> {
  if (webhookIds.length === 0 || payloads.length === 0) return [];
  // Every webhook × every payload, payload by payload (the ids keep the payloads' order).
  const inserted = await db(em)
    .insertInto('webhook_delivery')
    .columns(['webhook_id', 'event_type', 'payload'])
    .expression(
      sql`select w, ${eventType}, p from unnest(${webhookIds}::int[]) w
            cross join jsonb_array_elements(${JSON.stringify(payloads)}::jsonb) with ordinality as e(p, n)
           order by n, w`,
    )
    .returning((eb) => eb.cast<string>('id', 'text').as('id'))
    .execute();
  return inserted.map((r) => r.id);
}

/** One attempt, as the delivery log shows it. */
export type AttemptRecord = {
  at: string;
  status_code: number | null;
  error: string | null;
  duration_ms: number;
  /** The start of the receiver's answer (at most 500 characters). */
  response: string | null;
};

export type DeliveryStatus = 'pending' | 'delivered' | 'failed';

/** A delivery's columns (`d`), its status and attempt log as they are written here. */
function selectDeliveries(em: EntityManager) {
  return db(em)
    .selectFrom('webhook_delivery as d')
    .select((eb) => [
      eb.cast<string>('d.id', 'text').as('id'),
      'd.webhook_id',
      'd.event_type',
      'd.payload',
      'd.status',
      'd.attempts',
      'd.last_status_code',
      'd.last_error',
      'd.attempt_log',
      'd.next_attempt_at',
      'd.delivered_at',
      'd.created_at',
    ])
    .$narrowType<{ status: DeliveryStatus; attempt_log: AttemptRecord[] }>();
}

export type DeliveryView = InferResult<ReturnType<typeof selectDeliveries>>[number];

/** A webhook's delivery log, newest first. */
export function listDeliveries(em: EntityManager, webhookId: number, page: Page): Promise<PageResult<DeliveryView>> {
  return pagedSelect(em, selectDeliveries(em).where('d.webhook_id', '=', webhookId).orderBy('d.id', 'desc'), page);
}

/** A delivery with its webhook's address and secret. */
function selectDeliveriesToSend(em: EntityManager) {
  return selectDeliveries(em)
    .innerJoin('webhook as w', 'w.id', 'd.webhook_id')
    .select(['w.project_id', 'w.url', 'w.secret', 'w.enabled']);
}

export type DeliveryToSend = InferResult<ReturnType<typeof selectDeliveriesToSend>>[number];

/** A delivery with its webhook's address and secret (undefined: gone with its webhook). */
export function deliveryToSend(em: EntityManager, id: string): Promise<DeliveryToSend | undefined> {
  return selectDeliveriesToSend(em).where('d.id', '=', id).executeTakeFirst();
}

/** How many attempts a delivery has made, and its project's id (undefined: gone with its webhook). */
export function deliveryProgress(
  em: EntityManager,
  id: string,
): Promise<{ attempts: number; project_id: number } | undefined> {
  return db(em)
    .selectFrom('webhook_delivery as d')
    .innerJoin('webhook as w', 'w.id', 'd.webhook_id')
    .select(['d.attempts', 'w.project_id'])
    .where('d.id', '=', id)
    .executeTakeFirst();
}

/** Attempts the log keeps per delivery (the oldest go first). */
const ATTEMPT_LOG_MAX = 50;

/**
 * Records an attempt on a pending delivery: `outcome` delivered, failed (the last attempt), or pending
 * (`nextAttemptAt`: the latest time the next attempt starts). Returns false when the delivery was no
 * longer pending (already delivered or failed): nothing is recorded.
 */
export async function recordAttempt(
  em: EntityManager,
  id: string,
  attempt: AttemptRecord,
  outcome: { status: DeliveryStatus; nextAttemptAt: Date | null },
): Promise<boolean> {
  const { numUpdatedRows } = await db(em)
    .updateTable('webhook_delivery')
    .set((eb) => ({
      status: outcome.status,
      attempts: eb('attempts', '+', 1),
      last_status_code: attempt.status_code,
      last_error: attempt.error,
      // The log with this attempt appended, its oldest dropped past ATTEMPT_LOG_MAX.
      attempt_log: sql<AttemptRecord[]>`(select coalesce(jsonb_agg(x order by n), '[]'::jsonb)
        from jsonb_array_elements(attempt_log || jsonb_build_array(${JSON.stringify(attempt)}::jsonb)) with ordinality as a(x, n)
       where n > jsonb_array_length(attempt_log) + 1 - ${ATTEMPT_LOG_MAX})`,
      next_attempt_at: outcome.nextAttemptAt,
      delivered_at: outcome.status === 'delivered' ? sql<Date>`now()` : null,
    }))
    .where('id', '=', id)
    .where('status', '=', 'pending')
    .executeTakeFirst();
  return numUpdatedRows > 0n;
}

/** A pending delivery gives up without an attempt (its webhook was disabled, or its job failed for good). */
export async function failDelivery(em: EntityManager, id: string, reason: string): Promise<void> {
  await db(em)
    .updateTable('webhook_delivery')
    .set({ status: 'failed', last_error: reason.slice(0, 2000), next_attempt_at: null })
    .where('id', '=', id)
    .where('status', '=', 'pending')
    .execute();
}

/**
 * Pending deliveries that should have been sent by now: made (or due for their retry) at least
 * `graceSeconds` ago, oldest first; `among`: only of these ids. The grace leaves a fresh delivery to the
 * hand-off after its commit and a retry to its delayed job: the reconciler acts only on what they missed.
 */
export async function overdueDeliveryIds(
  em: EntityManager,
  options: { among?: string[] | null; graceSeconds?: number; limit?: number } = {},
): Promise<string[]> {
  const among = options.among;
  let query = db(em)
    .selectFrom('webhook_delivery')
    .select((eb) => eb.cast<string>('id', 'text').as('id'))
    .where('status', '=', 'pending')
    .where(
      (eb) => eb.fn.coalesce('next_attempt_at', 'created_at'),
      '<=',
      sql<Date>`now() - make_interval(secs => ${options.graceSeconds ?? 0})`,
    );
  if (among) query = query.where('id', '=', sql<string>`any(${among}::bigint[])`);
  const found = await query
    .orderBy('id')
    .limit(options.limit ?? 10_000)
    .execute();
  return found.map((r) => r.id);
}

/** How long the delivery log keeps a finished delivery. */
export const DELIVERY_RETENTION_DAYS = 30;

/** Deletes delivered and failed deliveries older than DELIVERY_RETENTION_DAYS (of every project); returns how many. */
export async function purgeOldDeliveries(em: EntityManager): Promise<number> {
  const { numDeletedRows } = await db(em)
    .deleteFrom('webhook_delivery')
    .where('created_at', '<', sql<Date>`now() - make_interval(days => ${DELIVERY_RETENTION_DAYS})`)
    .where('status', '<>', 'pending')
    .executeTakeFirst();
  return Number(numDeletedRows);
}
