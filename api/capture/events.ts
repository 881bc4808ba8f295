// From a decoded payload to validated events (spec §8.1 shapes, §8.2 rules, §8.3 timestamps).
// One bad event rejects the whole request: nothing of it is stored.
import { randomUUID } from 'node:crypto';
import { isUuid } from '../../shared/db/sql.ts';
import type { IngestEvent } from '../../shared/ingestion/persons.ts';
import { captureError } from './decode.ts';

export interface CapturedRequest {
  token: string;
  events: IngestEvent[];
}

const isObject = (v: unknown): v is Record<string, any> => !!v && typeof v === 'object' && !Array.isArray(v);

function tokenProblem(token: string): string | null {
  if (token === '') return 'empty';
  if (token.length > 64) return 'too_long';
  if (!/^[\x20-\x7e]*$/.test(token)) return token.includes('\u0000') ? 'null_byte' : 'not_ascii';
  if (token.startsWith('phx_')) return 'personal_api_key';
  return null;
}

function distinctIdOf(raw: Record<string, any>): string | null {
  const value = raw.distinct_id ?? raw.$distinct_id ?? (isObject(raw.properties) ? raw.properties.distinct_id : undefined);
  if (value === undefined || value === null || value === '') return null;
  const text = (typeof value === 'string' ? value : JSON.stringify(value)).replace(/\u0000/g, '\uFFFD').slice(0, 200);
  return text.trim() === '' ? null : text;
}

function timestampOf(raw: Record<string, any>, sentAt: Date | null, now: Date): Date {
  const properties = isObject(raw.properties) ? raw.properties : {};
  if (typeof raw.timestamp === 'string') {
    const ts = Date.parse(raw.timestamp);
    if (!Number.isNaN(ts)) {
      // Clock-skew correction: trust the client's intervals, not its clock.
      if (sentAt && properties.$ignore_sent_at !== true) return new Date(now.getTime() + (ts - sentAt.getTime()));
      return new Date(ts);
    }
  }
  if (typeof raw.offset === 'number' && Number.isFinite(raw.offset)) return new Date(now.getTime() - raw.offset);
  return now;
}

/** PostgreSQL cannot store NUL characters: PostHog's capture replaces them with U+FFFD. */
function withoutNulls(value: unknown): unknown {
  if (typeof value === 'string') return value.includes('\u0000') ? value.replace(/\u0000/g, '\uFFFD') : value;
  if (Array.isArray(value)) return value.map(withoutNulls);
  if (value && typeof value === 'object') return Object.fromEntries(Object.entries(value).map(([k, v]) => [withoutNulls(k) as string, withoutNulls(v)]));
  return value;
}

export function eventsOf(payload: unknown, options: { engagePath: boolean; querySentAt?: string }): CapturedRequest {
  const now = new Date();
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
      rawEvents = [{ ...payload, event: '$identify', properties: { ...(isObject(payload.properties) ? payload.properties : {}) } }];
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

  let sentAt: Date | null = typeof sentAtValue === 'string' && !Number.isNaN(Date.parse(sentAtValue)) ? new Date(sentAtValue) : null;
  if (!sentAt && options.querySentAt && /^\d+$/.test(options.querySentAt)) {
    const ms = Number(options.querySentAt);
    if (new Date(ms).getUTCFullYear() > 2020) sentAt = new Date(ms);
  }

  const tokens = new Set<string>();
  const events: IngestEvent[] = [];
  for (const raw of rawEvents) {
    if (!isObject(raw)) throw captureError('event submitted with an invalid body');
    const properties = isObject(raw.properties) ? ({ ...(withoutNulls(raw.properties) as Record<string, unknown>) }) : {};
    const token = raw.token ?? raw.$token ?? raw.api_key ?? properties.token;
    if (typeof token === 'string') tokens.add(token.trim());
    if (raw.event === '$performance_event') continue;
    if (typeof raw.event !== 'string' || raw.event.trim() === '') throw captureError('event submitted with an empty event name');
    const distinctId = distinctIdOf(raw);
    if (distinctId === null) throw captureError('event submitted without a distinct_id');
    if (properties.$cookieless_mode !== undefined && typeof properties.$cookieless_mode !== 'boolean')
      throw captureError('event submitted with an invalid $cookieless_mode');
    // Top-level $set / $set_once join the properties ones (top level wins).
    for (const key of ['$set', '$set_once'] as const) {
      if (isObject(raw[key])) properties[key] = { ...(isObject(properties[key]) ? properties[key] : {}), ...(withoutNulls(raw[key]) as object) };
    }
    const uuid = typeof raw.uuid === 'string' && raw.uuid !== '' ? raw.uuid : randomUUID();
    if (!isUuid(uuid)) throw captureError('event submitted with an invalid uuid');
    events.push({ uuid, event: (withoutNulls(raw.event) as string).slice(0, 400), distinctId, properties, timestamp: timestampOf(raw, sentAt, now) });
  }

  let token: string;
  if (typeof batchToken === 'string') token = batchToken.trim();
  else if (tokens.size > 1) throw captureError('batch submitted with inconsistent api_key values', 401);
  else if (tokens.size === 1) token = [...tokens][0];
  else throw captureError('event submitted without an api_key', 401);
  const problem = tokenProblem(token);
  if (problem) throw captureError(`API key is not valid: ${problem}`, 401);
  return { token, events };
}
