// Webhooks and their deliveries: every statement on `webhook` and `webhook_delivery` lives here. A
// delivery row is an outbox row, inserted in the caller's transaction; its BullMQ job carries only its id.
import type { EntityManager } from '@mikro-orm/postgresql';
import { type Page, type PageResult, pagedQuery } from '../db/paged.ts';
import { pgArray, rows, run } from '../db/sql.ts';

export interface WebhookFields {
  url: string;
  secret: string;
  eventTypes: string[];
  enabled: boolean;
}

export interface StoredWebhook extends WebhookFields {
  id: number;
  projectId: number;
  createdById: number | null;
  createdAt: Date;
}

const WEBHOOK_COLUMNS = `id, project_id as "projectId", url, secret, event_types as "eventTypes", enabled,
  created_by_id as "createdById", created_at as "createdAt"`;

export async function insertWebhook(
  em: EntityManager,
  projectId: number,
  createdById: number | null,
  fields: WebhookFields,
): Promise<StoredWebhook> {
  const [row] = await rows<StoredWebhook>(
    em,
    `insert into webhook (project_id, created_by_id, url, secret, event_types, enabled)
     values (?, ?, ?, ?, ?::text[], ?) returning ${WEBHOOK_COLUMNS}`,
    [projectId, createdById, fields.url, fields.secret, pgArray(fields.eventTypes), fields.enabled],
  );
  return row;
}

export async function findWebhook(em: EntityManager, projectId: number, id: number): Promise<StoredWebhook | null> {
  const [row] = await rows<StoredWebhook>(
    em,
    `select ${WEBHOOK_COLUMNS} from webhook where project_id = ? and id = ?`,
    [projectId, id],
  );
  return row ?? null;
}

/** A project's webhooks, oldest first. */
export function listWebhooks(em: EntityManager, projectId: number, page: Page): Promise<PageResult<StoredWebhook>> {
  return pagedQuery<StoredWebhook>(
    em,
    {
      select: WEBHOOK_COLUMNS,
      from: { sql: 'webhook where project_id = ?', params: [projectId] },
      order: 'order by id',
    },
    page,
  );
}

/** Sets the given fields; answers the webhook after, or null when the project has no such webhook. */
export async function updateWebhook(
  em: EntityManager,
  projectId: number,
  id: number,
  fields: Partial<WebhookFields>,
): Promise<StoredWebhook | null> {
  const all: [string, unknown][] = [
    ['url = ?', fields.url],
    ['secret = ?', fields.secret],
    ['event_types = ?::text[]', fields.eventTypes && pgArray(fields.eventTypes)],
    ['enabled = ?', fields.enabled],
  ];
  const changes = all.filter(([, value]) => value !== undefined);
  if (changes.length === 0) return findWebhook(em, projectId, id);
  const sets = changes.map(([set]) => set);
  const params = changes.map(([, value]) => value);
  const [row] = await rows<StoredWebhook>(
    em,
    `update webhook set ${sets.join(', ')} where project_id = ? and id = ? returning ${WEBHOOK_COLUMNS}`,
    [...params, projectId, id],
  );
  return row ?? null;
}

/** Deletes the webhook and its delivery log; false when the project has no such webhook. */
export async function deleteWebhook(em: EntityManager, projectId: number, id: number): Promise<boolean> {
  return (await run(em, `delete from webhook where project_id = ? and id = ?`, [projectId, id])) > 0;
}

/** The project's enabled webhooks that receive `eventType` (an index probe: cheap when there are none). */
export async function subscribedWebhookIds(em: EntityManager, projectId: number, eventType: string): Promise<number[]> {
  const found = await rows<{ id: number }>(
    em,
    `select id from webhook where project_id = ? and enabled and ? = any(event_types) order by id`,
    [projectId, eventType],
  );
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
  const inserted = await rows<{ id: string }>(
    em,
    `insert into webhook_delivery (webhook_id, event_type, payload)
     select w, ?, p from unnest(?::int[]) w cross join jsonb_array_elements(?::jsonb) with ordinality as e(p, n)
      order by n, w
     returning id::text`,
    [eventType, pgArray(webhookIds), JSON.stringify(payloads)],
  );
  return inserted.map((r) => r.id);
}

export interface DeliveryView {
  id: string;
  webhook_id: number;
  event_type: string;
  payload: Record<string, unknown>;
  status: 'pending' | 'delivered' | 'failed';
  attempts: number;
  last_status_code: number | null;
  last_error: string | null;
  attempt_log: AttemptRecord[];
  next_attempt_at: Date | null;
  delivered_at: Date | null;
  created_at: Date;
}

const deliveryColumns = (t: string) => `${t}.id::text, ${t}.webhook_id, ${t}.event_type, ${t}.payload, ${t}.status,
  ${t}.attempts, ${t}.last_status_code, ${t}.last_error, ${t}.attempt_log, ${t}.next_attempt_at, ${t}.delivered_at,
  ${t}.created_at`;

/** A webhook's delivery log, newest first. */
export function listDeliveries(em: EntityManager, webhookId: number, page: Page): Promise<PageResult<DeliveryView>> {
  return pagedQuery<DeliveryView>(
    em,
    {
      select: deliveryColumns('d'),
      from: { sql: 'webhook_delivery d where d.webhook_id = ?', params: [webhookId] },
      order: 'order by d.id desc',
    },
    page,
  );
}

export interface DeliveryToSend extends DeliveryView {
  project_id: number;
  url: string;
  secret: string;
  enabled: boolean;
}

/** A delivery with its webhook's address and secret (undefined: gone with its webhook). */
export async function deliveryToSend(em: EntityManager, id: string): Promise<DeliveryToSend | undefined> {
  const [row] = await rows<DeliveryToSend>(
    em,
    `select ${deliveryColumns('d')}, w.project_id, w.url, w.secret, w.enabled
       from webhook_delivery d join webhook w on w.id = d.webhook_id where d.id = ?`,
    [id],
  );
  return row;
}

/** One attempt, as the delivery log shows it. */
export interface AttemptRecord {
  at: string;
  status_code: number | null;
  error: string | null;
  duration_ms: number;
  /** The start of the receiver's answer (at most 500 characters). */
  response: string | null;
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
  outcome: { status: 'delivered' | 'failed' | 'pending'; nextAttemptAt: Date | null },
): Promise<boolean> {
  const changed = await run(
    em,
    `update webhook_delivery
        set status = ?, attempts = attempts + 1, last_status_code = ?, last_error = ?,
            attempt_log = (select coalesce(jsonb_agg(x order by n), '[]'::jsonb)
                             from jsonb_array_elements(attempt_log || jsonb_build_array(?::jsonb)) with ordinality as a(x, n)
                            where n > jsonb_array_length(attempt_log) + 1 - ?),
            next_attempt_at = ?::timestamptz,
            delivered_at = case when ? = 'delivered' then now() end
      where id = ? and status = 'pending'`,
    [
      outcome.status,
      attempt.status_code,
      attempt.error,
      JSON.stringify(attempt),
      ATTEMPT_LOG_MAX,
      outcome.nextAttemptAt?.toISOString() ?? null,
      outcome.status,
      id,
    ],
  );
  return changed > 0;
}

/** A pending delivery gives up without an attempt (its webhook was disabled, or its job failed for good). */
export async function failDelivery(em: EntityManager, id: string, reason: string): Promise<void> {
  await run(
    em,
    `update webhook_delivery set status = 'failed', last_error = ?, next_attempt_at = null where id = ? and status = 'pending'`,
    [reason.slice(0, 2000), id],
  );
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
  const among = options.among ? pgArray(options.among) : null;
  const found = await rows<{ id: string }>(
    em,
    `select id::text from webhook_delivery
      where status = 'pending' and coalesce(next_attempt_at, created_at) <= now() - make_interval(secs => ?)
        and (?::bigint[] is null or id = any(?::bigint[]))
      order by id limit ?`,
    [options.graceSeconds ?? 0, among, among, options.limit ?? 10_000],
  );
  return found.map((r) => r.id);
}

/** How long the delivery log keeps a finished delivery. */
export const DELIVERY_RETENTION_DAYS = 30;

/** Deletes delivered and failed deliveries older than DELIVERY_RETENTION_DAYS (of every project); returns how many. */
export function purgeOldDeliveries(em: EntityManager): Promise<number> {
  return run(
    em,
    `delete from webhook_delivery where created_at < now() - make_interval(days => ?) and status <> 'pending'`,
    [DELIVERY_RETENTION_DAYS],
  );
}
