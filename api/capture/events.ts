// From a decoded payload to validated events (PostHog's rust/capture payload shapes and checks; timestamps as the plugin server's parseEventTimestamp).
// A request PostHog refuses whole (no usable token, an event without a name or distinct id) stores
// nothing. One event PostgreSQL could not store is repaired or dropped as PostHog's capture does
// (timestamps out of range, NUL and lone surrogates, nesting too deep), and each such event gets an
// ingestion warning (shared/ingestion/warnings.ts).
import { randomUUID } from 'node:crypto';
import { isUuid } from '../../shared/platform/db/sql.ts';
import type { IngestEvent } from '../../shared/persons/index.ts';
import type { IngestionWarningInput } from '../../shared/ingestion/index.ts';
import { clipped } from '../../shared/platform/text.ts';
import { captureError } from './decode.ts';

/** The request's token and its events, before the events are checked. */
export interface SdkRequest {
  token: string;
  rawEvents: unknown[];
  sentAtValue: unknown;
}

const isObject = (v: unknown): v is Record<string, unknown> => !!v && typeof v === 'object' && !Array.isArray(v);

function tokenProblem(token: string): string | null {
  if (token === '') return 'empty';
  if (token.length > 64) return 'too_long';
  if (!/^[\x20-\x7e]*$/.test(token)) return token.includes('\u0000') ? 'null_byte' : 'not_ascii';
  if (token.startsWith('phx_')) return 'personal_api_key';
  return null;
}

/**
 * The shape of the payload and its token (as rust/capture checks them): cheap, so the project can be checked
 * before any event is looked at.
 */
export function requestOf(payload: unknown, options: { engagePath: boolean }): SdkRequest {
  let rawEvents: unknown[];
  let batchToken: unknown;
  let sentAtValue: unknown;
  if (Array.isArray(payload)) {
    rawEvents = payload;
  } else if (isObject(payload) && Array.isArray(payload.batch)) {
    rawEvents = payload.batch;
    batchToken = payload.api_key ?? payload.token;
    sentAtValue = payload.sent_at;
  } else if (isObject(payload)) {
    if (payload.event === undefined && options.engagePath) {
      rawEvents = [
        { ...payload, event: '$identify', properties: { ...(isObject(payload.properties) ? payload.properties : {}) } },
      ];
    } else if (payload.event === undefined) {
      throw captureError('non-engage request missing event name attribute');
    } else {
      rawEvents = [payload];
    }
    sentAtValue = payload.sent_at;
  } else {
    throw captureError('request holds no event');
  }
  if (rawEvents.length === 0) throw captureError('request holds no event');

  let token: string;
  if (typeof batchToken === 'string') {
    token = batchToken.trim();
  } else {
    const tokens = new Set<string>();
    for (const raw of rawEvents) {
      if (!isObject(raw)) continue;
      const value =
        raw.token ?? raw.$token ?? raw.api_key ?? (isObject(raw.properties) ? raw.properties.token : undefined);
      if (typeof value === 'string') tokens.add(value.trim());
    }
    if (tokens.size > 1) throw captureError('batch submitted with inconsistent api_key values', 401);
    if (tokens.size === 0) throw captureError('event submitted without an api_key', 401);
    token = [...tokens][0];
  }
  const problem = tokenProblem(token);
  if (problem) throw captureError(`API key is not valid: ${problem}`, 401);
  return { token, rawEvents, sentAtValue };
}

// PostgreSQL stores neither NUL nor a lone surrogate (jsonb refuses the escape, text the byte):
// PostHog's capture turns both into U+FFFD, in keys and values alike.
function repairedString(text: string): string {
  const wellFormed = text.isWellFormed() ? text : text.toWellFormed();
  return wellFormed.includes('\u0000') ? wellFormed.replaceAll('\u0000', '\uFFFD') : wellFormed;
}

/** Deeper than PostHog's capture can parse (its JSON parser stops at 128 levels for the whole payload). */
const MAX_EVENT_DEPTH = 128;
const TOO_DEEP = new Error('event nested too deep');

/**
 * Repairs every string of a freshly parsed event in place, counting them in `repairs`; throws
 * TOO_DEEP past MAX_EVENT_DEPTH levels (the depth bound also keeps every later walk of the event off
 * the stack limit).
 */
function repairedInPlace(value: unknown, depth: number, repairs: { strings: number }): unknown {
  if (typeof value === 'string') {
    const repaired = repairedString(value);
    if (repaired !== value) repairs.strings++;
    return repaired;
  }
  if (value === null || typeof value !== 'object') return value;
  if (depth > MAX_EVENT_DEPTH) throw TOO_DEEP;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) value[i] = repairedInPlace(value[i], depth + 1, repairs);
    return value;
  }
  const object = value as Record<string, unknown>;
  for (const key of Object.keys(object)) {
    const inner = object[key];
    const repaired = repairedInPlace(inner, depth + 1, repairs);
    const repairedKey = repairedString(key);
    if (repairedKey !== key) {
      repairs.strings++;
      delete object[key];
    }
    // defineProperty, not assignment: a key named "__proto__" must stay a plain property.
    if (repairedKey !== key || repaired !== inner)
      Object.defineProperty(object, repairedKey, {
        value: repaired,
        enumerable: true,
        writable: true,
        configurable: true,
      });
  }
  return object;
}

const MAX_EVENT_NAME = 400;
const MAX_DISTINCT_ID = 200;

/** The event's distinct id (a non-string one as its JSON), and whether it was cut to MAX_DISTINCT_ID. */
function distinctIdOf(raw: Record<string, unknown>): { id: string; cut: boolean } | null {
  const value =
    raw.distinct_id ?? raw.$distinct_id ?? (isObject(raw.properties) ? raw.properties.distinct_id : undefined);
  if (value === undefined || value === null || value === '') return null;
  const whole = typeof value === 'string' ? value : JSON.stringify(value);
  const id = clipped(whole, MAX_DISTINCT_ID);
  return id.trim() === '' ? null : { id, cut: id !== whole };
}

const FUTURE_CUTOFF_MS = 23 * 3600 * 1000;
const FIRST_MS = Date.parse('0001-01-01T00:00:00Z');
const LAST_MS = Date.parse('9999-12-31T23:59:59.999Z');

type Warning = Omit<IngestionWarningInput, 'eventUuid' | 'distinctId'>;

/**
 * PostHog's parseEventTimestamp (plugin server), then its bounds: over 23 h ahead → now; outside years
 * 1–9999 → the Unix epoch. Each departure from what the client sent is a warning, as in PostHog.
 */
function timestampOf(
  raw: Record<string, unknown>,
  properties: Record<string, unknown>,
  sentAt: Date | null,
  sentAtValue: unknown,
  now: Date,
  warnings: Warning[],
): Date {
  let ms = now.getTime();
  const given = raw.timestamp;
  const parsed = typeof given === 'string' ? Date.parse(given) : NaN;
  if (!Number.isNaN(parsed)) {
    // Clock-skew correction: trust the client's intervals, not its clock.
    const skewCorrected = properties.$ignore_sent_at !== true;
    ms = sentAt && skewCorrected ? now.getTime() + (parsed - sentAt.getTime()) : parsed;
    if (!sentAt && skewCorrected && sentAtValue !== undefined && sentAtValue !== null)
      warnings.push({
        type: 'ignored_invalid_timestamp',
        details: { field: 'sent_at', value: shortJson(sentAtValue), reason: 'unreadable; no clock-skew correction' },
      });
  } else {
    if (given !== undefined && given !== null)
      warnings.push({
        type: 'ignored_invalid_timestamp',
        details: { field: 'timestamp', value: shortJson(given), reason: 'unreadable; offset or server time used' },
      });
    if (typeof raw.offset === 'number' && Number.isFinite(raw.offset)) ms = now.getTime() - raw.offset;
  }
  const asSent = { timestamp: shortJson(given), sentAt: shortJson(sentAtValue), offset: shortJson(raw.offset) };
  if (ms - now.getTime() > FUTURE_CUTOFF_MS) {
    warnings.push({
      type: 'event_timestamp_in_future',
      details: { ...asSent, now: now.toISOString(), result: now.toISOString(), reason: 'more than 23 hours ahead' },
    });
    return now;
  }
  if (!(ms >= FIRST_MS && ms <= LAST_MS)) {
    warnings.push({
      type: 'ignored_invalid_timestamp',
      details: { ...asSent, result: new Date(0).toISOString(), reason: 'before year 1 or after 9999' },
    });
    return new Date(0);
  }
  return new Date(ms);
}

/**
 * A client's value as a warning shows it: short, never a deep walk, and storable (a value outside the
 * repaired event — `sent_at`, a dropped event's fields — may still hold NUL or lone surrogates).
 */
function shortJson(value: unknown): string | number | boolean | null {
  if (value === undefined || value === null) return null;
  if (typeof value === 'number' || typeof value === 'boolean') return value;
  const text = typeof value === 'string' ? value : typeof value === 'object' ? '(object)' : String(value);
  return repairedString(clipped(text, 200));
}

/** A string field of an event that was not repaired (dropped before), as a warning shows it; null otherwise. */
const shownString = (value: unknown, max: number) =>
  typeof value === 'string' ? repairedString(clipped(value, max)) : null;

/** The event's own uuid, when it is one (read from the top level only: the event may be too deep to walk). */
const givenUuid = (raw: Record<string, unknown>) =>
  typeof raw.uuid === 'string' && isUuid(raw.uuid) ? raw.uuid : null;

/**
 * The size of the Kafka message PostHog's capture produces for an event, the one its per-event limit
 * bounds (KAFKA_PRODUCER_MESSAGE_MAX_BYTES, librdkafka's message.max.bytes, default 1 000 000: see
 * maxEventBytes in shared/platform/config.ts): the event's JSON as the envelope's `data` string (its quotes and
 * backslashes escaped once more) with the envelope's other fields. The client's address, unknown here,
 * is counted as the longest IPv6 text, so an event that fits here fits there.
 */
function capturedMessageBytes(raw: Record<string, unknown>, uuid: string, distinctId: string, token: string): number {
  const envelope = {
    uuid,
    distinct_id: distinctId,
    ip: 'ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255',
    data: JSON.stringify(raw),
    now: new Date().toISOString(),
    sent_at: new Date().toISOString(),
    token,
  };
  return Buffer.byteLength(JSON.stringify(envelope));
}

/**
 * The request's events, checked and repaired; `warnings` holds one ingestion warning for each event
 * dropped or stored otherwise than sent. `oversized` holds a message_size_too_large warning for each
 * event over `maxEventBytes`: PostHog answers such a request 413 (its sink's EventTooBig), so the caller
 * fails the request and records only these.
 */
export function eventsOf(
  request: SdkRequest,
  options: { querySentAt?: string; maxEventBytes?: number },
): { events: IngestEvent[]; warnings: IngestionWarningInput[]; oversized: IngestionWarningInput[] } {
  const now = new Date();
  const { sentAtValue } = request;
  let sentAt: Date | null =
    typeof sentAtValue === 'string' && !Number.isNaN(Date.parse(sentAtValue)) ? new Date(sentAtValue) : null;
  if (!sentAt && options.querySentAt && /^\d+$/.test(options.querySentAt)) {
    const ms = Number(options.querySentAt);
    if (new Date(ms).getUTCFullYear() > 2020) sentAt = new Date(ms);
  }

  const events: IngestEvent[] = [];
  const warnings: IngestionWarningInput[] = [];
  const oversized: IngestionWarningInput[] = [];
  const repairs = { strings: 0 };
  for (const raw of request.rawEvents) {
    if (!isObject(raw)) throw captureError('event submitted with an invalid body');
    if (raw.event === '$performance_event') {
      warnings.push({
        type: 'event_dropped_performance_event',
        eventUuid: givenUuid(raw),
        distinctId: shownString(raw.distinct_id, MAX_DISTINCT_ID),
        details: { eventName: '$performance_event', reason: 'performance events are not stored (as in PostHog)' },
      });
      continue;
    }
    repairs.strings = 0;
    try {
      repairedInPlace(raw, 1, repairs);
    } catch (error) {
      if (error !== TOO_DEEP) throw error;
      warnings.push({
        type: 'event_dropped_too_deep',
        eventUuid: givenUuid(raw),
        distinctId: shownString(raw.distinct_id, MAX_DISTINCT_ID),
        details: {
          eventName: shownString(raw.event, MAX_EVENT_NAME),
          reason: `nested more than ${MAX_EVENT_DEPTH} levels deep; the event is not stored`,
        },
      });
      continue;
    }
    const properties: Record<string, unknown> = isObject(raw.properties) ? { ...raw.properties } : {};
    if (typeof raw.event !== 'string' || raw.event.trim() === '')
      throw captureError('event submitted with an empty event name');
    const distinct = distinctIdOf(raw);
    if (distinct === null) throw captureError('event submitted without a distinct_id');
    const distinctId = distinct.id;
    if (properties.$cookieless_mode !== undefined && typeof properties.$cookieless_mode !== 'boolean')
      throw captureError('event submitted with an invalid $cookieless_mode');
    // Top-level $set / $set_once join the properties ones (top level wins).
    for (const key of ['$set', '$set_once'] as const) {
      if (isObject(raw[key])) properties[key] = { ...(isObject(properties[key]) ? properties[key] : {}), ...raw[key] };
    }
    const uuid = typeof raw.uuid === 'string' && raw.uuid !== '' ? raw.uuid : randomUUID();
    if (!isUuid(uuid)) throw captureError('event submitted with an invalid uuid');
    if (options.maxEventBytes !== undefined) {
      const bytes = capturedMessageBytes(raw, uuid, distinctId, request.token);
      if (bytes > options.maxEventBytes) {
        oversized.push({
          type: 'message_size_too_large',
          eventUuid: uuid,
          distinctId,
          details: {
            eventName: clipped(raw.event, MAX_EVENT_NAME),
            bytes,
            limitBytes: options.maxEventBytes,
            reason: 'larger than PostHog captures (its Kafka message limit); the request was answered 413',
          },
        });
        continue;
      }
    }
    const eventWarnings: Warning[] = [];
    const timestamp = timestampOf(raw, properties, sentAt, sentAtValue, now, eventWarnings);
    const event = clipped(raw.event, MAX_EVENT_NAME);
    if (repairs.strings > 0)
      eventWarnings.push({
        type: 'invalid_unicode_replaced',
        details: { eventName: event, strings: repairs.strings, reason: 'NUL or lone surrogates replaced by U+FFFD' },
      });
    if (event !== raw.event || distinct.cut)
      eventWarnings.push({
        type: 'event_field_truncated',
        details: {
          eventName: event,
          fields: [...(event !== raw.event ? ['event'] : []), ...(distinct.cut ? ['distinct_id'] : [])],
          reason: `event names are cut to ${MAX_EVENT_NAME} characters, distinct ids to ${MAX_DISTINCT_ID}`,
        },
      });
    for (const warning of eventWarnings) warnings.push({ ...warning, eventUuid: uuid, distinctId });
    events.push({ uuid, event, distinctId, properties, timestamp });
  }
  return { events, warnings, oversized };
}
