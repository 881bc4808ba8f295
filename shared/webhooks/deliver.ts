// The job body of one webhook delivery: a signed POST to the customer's URL, every attempt recorded on
// the delivery row. The URL is the customer's, so nothing about the answer is trusted: the whole attempt
// (connect, answer, reading it) has a time limit, at most `maxResponseBytes` of the answer are read, and
// a redirect is not followed. A 2xx status delivers (its body need not finish within the limit). A failed attempt throws, so BullMQ retries the job
// with its exponential backoff; the last one marks the delivery failed.
import type { EntityManager } from '@mikro-orm/postgresql';
import { deliveryBody, signWebhook } from './service.ts';
import { deliveryToSend, failDelivery, recordAttempt, type AttemptRecord } from './store.ts';

export interface DeliverySettings {
  timeoutMs: number;
  maxResponseBytes: number;
  /** The first retry's delay (BullMQ's exponential backoff), for the delivery's next_attempt_at. */
  backoffMs: number;
}

/** A failed attempt, recorded; thrown so that the queue retries it. */
export class DeliveryAttemptFailed extends Error {}

/** The start of the answer kept in the delivery log. */
const RESPONSE_EXCERPT = 500;

/**
 * Posts delivery `id` once. `attempt` is this attempt's number (1-based) and whether it is the last one
 * the queue will make. A delivery no longer pending (delivered or failed already, or gone with its
 * webhook) is skipped.
 */
export async function deliverWebhook(
  em: EntityManager,
  id: string,
  attempt: { number: number; last: boolean },
  settings: DeliverySettings,
): Promise<{ skipped: string } | { statusCode: number; ms: number }> {
  const delivery = await deliveryToSend(em, id);
  if (!delivery) return { skipped: 'the webhook was deleted' };
  if (delivery.status !== 'pending') return { skipped: `already ${delivery.status}` };
  if (!delivery.enabled) {
    await failDelivery(em, id, 'the webhook was disabled before the delivery was made');
    return { skipped: 'the webhook is disabled' };
  }
  const body = deliveryBody(delivery);
  const timestamp = String(Math.floor(Date.now() / 1000));
  const result = await post(
    delivery.url,
    body,
    {
      'content-type': 'application/json',
      'user-agent': 'analytics-webhooks/1',
      'x-webhook-id': delivery.id,
      'x-webhook-timestamp': timestamp,
      'x-webhook-signature': signWebhook(delivery.secret, timestamp, body),
    },
    settings,
  );
  const ok =
    result.error === null && result.status_code !== null && result.status_code >= 200 && result.status_code < 300;
  const status = ok ? 'delivered' : attempt.last ? 'failed' : 'pending';
  // BullMQ's exponential backoff waits up to delay * 2^(attempt - 1) (less with its jitter).
  const nextAttemptAt =
    status === 'pending' ? new Date(Date.now() + settings.backoffMs * 2 ** (attempt.number - 1)) : null;
  const recorded = await recordAttempt(em, id, result, { status, nextAttemptAt });
  if (!recorded) return { skipped: 'finished by another attempt' };
  if (!ok) throw new DeliveryAttemptFailed(`webhook delivery ${id}: ${result.error ?? `HTTP ${result.status_code}`}`);
  return { statusCode: result.status_code!, ms: result.duration_ms };
}

/** One POST within the limits; never throws: a failure is in the record. */
async function post(
  url: string,
  body: string,
  headers: Record<string, string>,
  settings: DeliverySettings,
): Promise<AttemptRecord> {
  const at = new Date();
  const started = performance.now();
  const record = (status_code: number | null, error: string | null, response: string | null): AttemptRecord => ({
    at: at.toISOString(),
    status_code,
    error,
    duration_ms: Math.round(performance.now() - started),
    response,
  });
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), settings.timeoutMs);
  let statusCode: number | null = null;
  try {
    const response = await fetch(url, { method: 'POST', body, headers, redirect: 'manual', signal: controller.signal });
    statusCode = response.status;
    // The status decides; an answer still streaming at the time limit only loses its excerpt.
    const text = await readCapped(response, settings.maxResponseBytes).catch(() => '');
    const error = statusCode >= 200 && statusCode < 300 ? null : `HTTP ${statusCode}`;
    return record(statusCode, error, text.slice(0, RESPONSE_EXCERPT) || null);
  } catch (error) {
    if (controller.signal.aborted) return record(statusCode, `timed out after ${settings.timeoutMs} ms`, null);
    const cause = (error as Error & { cause?: { code?: string; message?: string } }).cause;
    return record(statusCode, cause?.code ?? cause?.message ?? (error as Error).message, null);
  } finally {
    clearTimeout(timer);
  }
}

/** Reads at most `maxBytes` of the answer and drops the rest unread (the connection is closed). */
async function readCapped(response: Response, maxBytes: number): Promise<string> {
  const reader = response.body?.getReader();
  if (!reader) return '';
  const chunks: Uint8Array[] = [];
  let size = 0;
  try {
    while (size < maxBytes) {
      const { done, value } = await reader.read();
      if (done) return Buffer.concat(chunks).toString('utf8');
      chunks.push(value.subarray(0, maxBytes - size));
      size += Math.min(value.length, maxBytes - size);
    }
  } finally {
    await reader.cancel().catch(() => undefined);
  }
  return Buffer.concat(chunks).toString('utf8');
}
