// PostHog's burst (per minute) and sustained (per hour) throttles for personal-API-key requests,
// counted per key in Redis with fixed windows. If Redis does not answer, requests pass: losing
// rate limiting for a moment is better than refusing every request.
import type { RedisConnection } from '../../shared/redis.ts';
import { throttled } from './errors.ts';
import { logger } from '../../shared/logger.ts';

export interface ThrottleSettings {
  enabled: boolean;
  perMinute: number;
  perHour: number;
  prefix: string;
}

export interface ThrottleState {
  limit: number;
  remaining: number;
  /** Seconds until the tighter window resets. */
  resetSeconds: number;
}

/**
 * Counts this request against the key's minute and hour windows. Throws 429 past either limit;
 * otherwise returns the state of the tighter window, for the X-RateLimit-* headers.
 */
export async function enforceThrottle(redis: RedisConnection, settings: ThrottleSettings, keyId: string, now = Date.now()): Promise<ThrottleState | null> {
  if (!settings.enabled) return null;
  const seconds = Math.floor(now / 1000);
  const minuteWindow = Math.floor(seconds / 60);
  const hourWindow = Math.floor(seconds / 3600);
  // One hash tag per API key: on a Redis Cluster both counters sit in one slot, as MULTI needs.
  const minuteKey = `${settings.prefix}:throttle:{${keyId}}:m:${minuteWindow}`;
  const hourKey = `${settings.prefix}:throttle:{${keyId}}:h:${hourWindow}`;
  let results: [Error | null, unknown][] | null;
  try {
    results = await redis.multi().incr(minuteKey).expire(minuteKey, 61).incr(hourKey).expire(hourKey, 3601).exec();
  } catch (error) {
    logger.warn({ err: error }, 'throttle check skipped: Redis unavailable');
    return null;
  }
  if (!results) return null;
  const minuteCount = Number(results[0][1]);
  const hourCount = Number(results[2][1]);
  if (minuteCount > settings.perMinute) throw throttled(Math.max(1, (minuteWindow + 1) * 60 - seconds));
  if (hourCount > settings.perHour) throw throttled(Math.max(1, (hourWindow + 1) * 3600 - seconds));
  const minuteLeft = settings.perMinute - minuteCount;
  const hourLeft = settings.perHour - hourCount;
  return minuteLeft <= hourLeft
    ? { limit: settings.perMinute, remaining: minuteLeft, resetSeconds: (minuteWindow + 1) * 60 - seconds }
    : { limit: settings.perHour, remaining: hourLeft, resetSeconds: (hourWindow + 1) * 3600 - seconds };
}
