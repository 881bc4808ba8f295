// PostHog's burst (per minute) and sustained (per hour) throttles for personal-API-key requests,
// counted per key in Redis with fixed windows, and the guard against guessing the operator
// credentials. If Redis does not answer, both count in this process instead (LocalWindows): limits
// then hold per API process rather than for the install, but never lapse.
import { createHash } from 'node:crypto';
import type { RedisConnection } from '../../shared/platform/redis.ts';
import { throttled } from './errors.ts';
import { logger } from '../../shared/platform/logger.ts';

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
  /** false: Redis did not answer and the request was counted in this process only. */
  shared: boolean;
}

interface Window {
  count: number;
  /** Seconds until the window ends. */
  ttl: number;
}

const MAX_LOCAL_WINDOWS = 100_000;

/**
 * Fixed-window counters in this process's memory, for while Redis does not answer. Ended windows are
 * swept every few seconds; past MAX_LOCAL_WINDOWS live ones the oldest go first, so a flood of
 * distinct keys costs bounded memory.
 */
class LocalWindows {
  private windows = new Map<string, { count: number; endsAt: number }>();
  private nextSweep = 0;

  private live(key: string, now: number) {
    const window = this.windows.get(key);
    if (window && window.endsAt > now) return window;
    if (window) this.windows.delete(key);
    return null;
  }

  private sweep(now: number) {
    if (now < this.nextSweep && this.windows.size < MAX_LOCAL_WINDOWS) return;
    this.nextSweep = now + 5000;
    for (const [key, window] of this.windows) if (window.endsAt <= now) this.windows.delete(key);
    for (const key of this.windows.keys()) {
      if (this.windows.size < MAX_LOCAL_WINDOWS) break;
      this.windows.delete(key);
    }
  }

  /** Counts one more in `key`'s window, opening a `seconds`-long one if none is open. */
  add(key: string, seconds: number, now = Date.now()): Window {
    this.sweep(now);
    let window = this.live(key, now);
    if (!window) {
      window = { count: 0, endsAt: now + seconds * 1000 };
      this.windows.set(key, window);
    }
    window.count++;
    return { count: window.count, ttl: Math.ceil((window.endsAt - now) / 1000) };
  }

  read(key: string, now = Date.now()): Window {
    const window = this.live(key, now);
    return window ? { count: window.count, ttl: Math.ceil((window.endsAt - now) / 1000) } : { count: 0, ttl: 0 };
  }
}

const local = new LocalWindows();

/**
 * Counts this request against the key's minute and hour windows. Throws 429 past either limit;
 * otherwise returns the state of the tighter window, for the X-RateLimit-* headers.
 */
export async function enforceThrottle(
  redis: RedisConnection,
  settings: ThrottleSettings,
  keyId: string,
  now = Date.now(),
): Promise<ThrottleState | null> {
  if (!settings.enabled) return null;
  const seconds = Math.floor(now / 1000);
  const minuteWindow = Math.floor(seconds / 60);
  const hourWindow = Math.floor(seconds / 3600);
  // One hash tag per API key: on a Redis Cluster both counters sit in one slot, as MULTI needs.
  const minuteKey = `${settings.prefix}:throttle:{${keyId}}:m:${minuteWindow}`;
  const hourKey = `${settings.prefix}:throttle:{${keyId}}:h:${hourWindow}`;
  let minuteCount: number;
  let hourCount: number;
  let shared = true;
  try {
    const results = await redis
      .multi()
      .incr(minuteKey)
      .expire(minuteKey, 61)
      .incr(hourKey)
      .expire(hourKey, 3601)
      .exec();
    if (!results || results.some(([error]) => error)) throw new Error('throttle transaction not executed');
    minuteCount = Number(results[0][1]);
    hourCount = Number(results[2][1]);
  } catch (error) {
    logger.warn({ err: error }, 'rate limit counted in this process only: Redis unavailable');
    // The keys name their window, so the local windows only need to outlive it.
    minuteCount = local.add(minuteKey, 61, now).count;
    hourCount = local.add(hourKey, 3601, now).count;
    shared = false;
  }
  if (minuteCount > settings.perMinute)
    throw throttled(Math.max(1, (minuteWindow + 1) * 60 - seconds), settings.perMinute);
  if (hourCount > settings.perHour) throw throttled(Math.max(1, (hourWindow + 1) * 3600 - seconds), settings.perHour);
  const minuteLeft = settings.perMinute - minuteCount;
  const hourLeft = settings.perHour - hourCount;
  return minuteLeft <= hourLeft
    ? { limit: settings.perMinute, remaining: minuteLeft, resetSeconds: (minuteWindow + 1) * 60 - seconds, shared }
    : { limit: settings.perHour, remaining: hourLeft, resetSeconds: (hourWindow + 1) * 3600 - seconds, shared };
}

export interface CredentialGuardSettings {
  prefix: string;
  /** Wrong credentials one client (address and user name, or proof) may send per minute before 429. */
  failuresPerMinute: number;
  /** Wrong credentials all clients without a proof may send together per hour, per realm, before 429. */
  failuresPerHour: number;
}

/** Who sends a credential, as the guard counts it. */
export interface CredentialClient {
  /** The client address (clientAddress). */
  address: string;
  /** The user name the credential is for ('' where there is none, as for a bearer token). */
  user: string;
  /**
   * A checked proof that this client gave a right credential before (the dashboard's sign-in cookie),
   * as a short id of it; null without one.
   */
  proof: string | null;
}

/** An IPv6 client commonly holds a whole /64: its addresses count as one. */
export function addressGroup(address: string): string {
  if (!address.includes(':')) return address;
  const [head, tail = null] = address.toLowerCase().split('::');
  const groups = (part: string | null) =>
    part ? part.split(':').flatMap((g) => (g.includes('.') ? ['v4', 'v4'] : [g])) : [];
  const left = groups(head);
  const right = groups(tail);
  const all =
    tail === null ? left : [...left, ...Array(Math.max(0, 8 - left.length - right.length)).fill('0'), ...right];
  return `${all
    .slice(0, 4)
    .map((g) => g.replace(/^0+(?=.)/, ''))
    .join(':')}::/64`;
}

const digest = (value: string) => createHash('sha256').update(value).digest('base64url').slice(0, 22);

/** Counts one more failure in `key`, in a window of `seconds` opened by the first (in this process while Redis fails). */
async function addFailure(redis: RedisConnection, key: string, seconds: number): Promise<Window> {
  try {
    const results = await redis.multi().set(key, 0, 'EX', seconds, 'NX').incr(key).ttl(key).exec();
    if (!results || results.some(([error]) => error)) throw new Error('guard transaction not executed');
    return { count: Number(results[1][1]), ttl: Number(results[2][1]) };
  } catch (error) {
    logger.warn({ err: error }, 'credential guessing counted in this process only: Redis unavailable');
    return local.add(key, seconds);
  }
}

async function readFailures(redis: RedisConnection, key: string): Promise<Window> {
  try {
    const results = await redis.multi().get(key).ttl(key).exec();
    if (!results || results.some(([error]) => error)) throw new Error('guard transaction not executed');
    return { count: Number(results[0][1] ?? 0), ttl: Number(results[1][1]) };
  } catch (error) {
    logger.warn({ err: error }, 'credential guessing read from this process only: Redis unavailable');
    return local.read(key);
  }
}

/**
 * Guards a credential check (the dashboard's password, the metrics token) against guessing, and
 * answers whether `credentialIsRight` (or throws 429).
 *
 * Wrong credentials are counted in fixed windows opened by the first failure: per client — its
 * address (an IPv6 /64) and the user name it tries — `failuresPerMinute` in a minute, and for the
 * realm as a whole `failuresPerHour` in an hour (so many addresses cannot guess many times faster than
 * one). Past either limit every answer is 429, the right credential's too: a throttled client cannot
 * tell a right guess from a wrong one, so nobody learns a credential faster than the limits allow.
 * A wrong credential counts (and is answered by its own count, atomically, so a burst of guesses gets
 * exactly the limit's worth of 401s); a right one only reads the counts, so a dashboard loading many
 * assets at once is never throttled.
 *
 * A right credential must still get in while someone else at the same address guesses: a client that
 * carries a proof of an earlier right credential (the dashboard's signed sign-in cookie, which no
 * guesser holds) is counted under that proof alone — not under its address, user name or the realm —
 * so guessing elsewhere never throttles it, and its own wrong guesses are throttled per proof. Without
 * a proof the right credential is indistinguishable from a guess, and a throttled client's guesses
 * are never answered by their rightness (Prometheus, which keeps no cookies, can therefore be kept
 * out by guessing from its own address or by the realm's limit; see README).
 */
export async function guardCredentialCheck(
  redis: RedisConnection,
  settings: CredentialGuardSettings,
  realm: string,
  client: CredentialClient,
  credentialIsRight: boolean,
): Promise<boolean> {
  const base = `${settings.prefix}:credential-failures:${realm}`;
  const windows = client.proof
    ? [{ key: `${base}:proof:${client.proof}`, seconds: 60, limit: settings.failuresPerMinute }]
    : [
        {
          key: `${base}:client:${addressGroup(client.address)}:${digest(client.user)}`,
          seconds: 60,
          limit: settings.failuresPerMinute,
        },
        { key: `${base}:all`, seconds: 3600, limit: settings.failuresPerHour },
      ];
  if (credentialIsRight) {
    // Separate keys, separate commands: on a Redis Cluster they may live in different slots.
    const counts = await Promise.all(windows.map((w) => readFailures(redis, w.key)));
    windows.forEach((w, i) => {
      if (counts[i].count >= w.limit) throw throttled(Math.max(1, counts[i].ttl), w.limit);
    });
    return true;
  }
  // One window after the other: a client past its own limit does not use up the realm's budget.
  for (const w of windows) {
    const { count, ttl } = await addFailure(redis, w.key, w.seconds);
    if (count > w.limit) throw throttled(Math.max(1, ttl), w.limit);
  }
  return false;
}
