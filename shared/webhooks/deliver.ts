// The job body of one webhook delivery: a signed POST to the customer's URL, every attempt recorded on
// the delivery row. The URL is the customer's, so nothing about the answer is trusted: the whole attempt
// (connect, answer, reading it) has a time limit, at most `maxResponseBytes` of the answer are read, and
// a redirect is not followed, and a host inside our network is refused (addresses.ts: the delivery fails
// at once, without retries). A 2xx status delivers (its body need not finish within the limit). A failed
// attempt throws DeliveryAttemptFailed with the time of the next one (exponential backoff), which the job
// waits for; the last one marks the delivery failed.
import { UnrecoverableError } from 'bullmq';
import type { IncomingMessage } from 'node:http';
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { LookupFunction } from 'node:net';
import type { EntityManager } from '@mikro-orm/postgresql';
import { hostOf, PrivateAddressError, type ResolvedAddress, resolveWebhookHost } from './addresses.ts';
import { deliveryBody, webhookSignatureHeaders } from './service.ts';
import { deliveryToSend, failDelivery, recordAttempt, type AttemptRecord } from './store.ts';

export interface DeliverySettings {
  timeoutMs: number;
  maxResponseBytes: number;
  /** The first retry's delay; each next one doubles it (less a random part of up to half). */
  backoffMs: number;
  /** WEBHOOK_ALLOW_PRIVATE_URLS: whether a delivery may go to an address that is not public unicast (addresses.ts). */
  allowPrivateUrls: boolean;
}

/**
 * A failed attempt, recorded. `retryAt`: when the next attempt is due (the job waits for it), null after
 * the last. Unrecoverable for BullMQ: the attempts are the delivery's (counted on its row), not the job's.
 */
export class DeliveryAttemptFailed extends UnrecoverableError {
  readonly retryAt: Date | null;
  constructor(message: string, retryAt: Date | null) {
    super(message);
    this.retryAt = retryAt;
  }
}

/** The wait before attempt `failed + 1`: backoffMs · 2^(failed − 1), less a random part of up to half (BullMQ's jitter 0.5). */
export const retryDelayMs = (backoffMs: number, failed: number) =>
  Math.round(backoffMs * 2 ** (failed - 1) * (1 - Math.random() * 0.5));

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
): Promise<{ skipped: string } | { refused: string } | { statusCode: number; ms: number }> {
  const delivery = await deliveryToSend(em, id);
  if (!delivery) return { skipped: 'the webhook was deleted' };
  if (delivery.status !== 'pending') return { skipped: `already ${delivery.status}` };
  if (!delivery.enabled) {
    await failDelivery(em, id, 'the webhook was disabled before the delivery was made');
    return { skipped: 'the webhook is disabled' };
  }
  const body = deliveryBody(delivery);
  const { record: result, refused } = await post(
    delivery.url,
    body,
    {
      'content-type': 'application/json',
      'user-agent': 'analytics-webhooks/1',
      ...webhookSignatureHeaders(delivery.secret, delivery.id, new Date(), body),
    },
    settings,
  );
  const ok =
    result.error === null && result.status_code !== null && result.status_code >= 200 && result.status_code < 300;
  // A refused destination fails the delivery at once: retrying would only be refused again.
  const status = ok ? 'delivered' : attempt.last || refused ? 'failed' : 'pending';
  const nextAttemptAt =
    status === 'pending' ? new Date(Date.now() + retryDelayMs(settings.backoffMs, attempt.number)) : null;
  const recorded = await recordAttempt(em, id, result, { status, nextAttemptAt });
  if (!recorded) return { skipped: 'finished by another attempt' };
  if (refused) return { refused: result.error! };
  if (!ok)
    throw new DeliveryAttemptFailed(
      `webhook delivery ${id}: ${result.error ?? `HTTP ${result.status_code}`}`,
      nextAttemptAt,
    );
  return { statusCode: result.status_code!, ms: result.duration_ms };
}

/** A POST's outcome: an attempt record, and whether the destination was refused (not worth retrying). */
interface PostOutcome {
  record: AttemptRecord;
  refused: boolean;
}

/**
 * One POST within the limits; never throws: a failure is in the record. The host is resolved and every
 * address checked first (PrivateAddressError: refused), then the connection goes to the checked address
 * (TLS still verifies the certificate for the host name), so a second resolution cannot send it elsewhere.
 */
async function post(
  url: string,
  body: string,
  headers: Record<string, string>,
  settings: DeliverySettings,
): Promise<PostOutcome> {
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
    const target = new URL(url);
    const [address] = await resolveWebhookHost(hostOf(target), settings.allowPrivateUrls);
    if (!address) return { record: record(null, 'the host has no address', null), refused: false };
    const response = await send(target, address, body, headers, controller.signal);
    statusCode = response.statusCode ?? null;
    // The status decides; an answer still streaming at the time limit only loses its excerpt.
    const text = await readCapped(response, settings.maxResponseBytes).catch(() => '');
    const ok = statusCode !== null && statusCode >= 200 && statusCode < 300;
    return {
      record: record(statusCode, ok ? null : `HTTP ${statusCode}`, text.slice(0, RESPONSE_EXCERPT) || null),
      refused: false,
    };
  } catch (error) {
    if (error instanceof PrivateAddressError) return { record: record(null, error.message, null), refused: true };
    if (controller.signal.aborted)
      return { record: record(statusCode, `timed out after ${settings.timeoutMs} ms`, null), refused: false };
    const e = error as Error & { code?: string };
    return { record: record(statusCode, e.code ?? e.message, null), refused: false };
  } finally {
    clearTimeout(timer);
  }
}

/** The request itself, connected to `address` whatever the host name resolves to now; redirects are not followed. */
function send(
  url: URL,
  address: ResolvedAddress,
  body: string,
  headers: Record<string, string>,
  signal: AbortSignal,
): Promise<IncomingMessage> {
  const pinned: LookupFunction = (_host, options, callback) => {
    if (options.all) callback(null, [address]);
    else callback(null, address.address, address.family);
  };
  return new Promise((resolve, reject) => {
    const request = (url.protocol === 'https:' ? httpsRequest : httpRequest)(
      url,
      {
        method: 'POST',
        headers: { ...headers, 'content-length': String(Buffer.byteLength(body)) },
        lookup: pinned,
        signal,
      },
      resolve,
    );
    request.on('error', reject);
    request.end(body);
  });
}

/** Reads at most `maxBytes` of the answer and drops the rest unread (the connection is closed). */
async function readCapped(response: IncomingMessage, maxBytes: number): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of response as AsyncIterable<Buffer>) {
      chunks.push(chunk.subarray(0, maxBytes - size));
      size += Math.min(chunk.length, maxBytes - size);
      if (size >= maxBytes) break;
    }
  } finally {
    response.destroy();
  }
  return Buffer.concat(chunks).toString('utf8');
}
