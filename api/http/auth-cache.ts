// Authentication results kept in the API process, so a project request costs one round trip to
// PostgreSQL instead of two. Correctness rests on invalidation, not on expiry: migration 0017 makes
// every change to keys, users, memberships and projects notify `auth_changed`, whichever process
// makes it, and each API process LISTENs and drops its whole cache on a notification. While the
// listening connection is down the cache is off (every request reads PostgreSQL), so a lost
// notification cannot keep a revoked key working. The expiry only bounds memory of idle keys.
import type { KeyWithProject } from '../../shared/accounts/index.ts';
import { ChannelListener } from './listener.ts';

/** Rows by key (the API's: what keyWithProject() found for a personal API key, as sent, and a project). */
export class AuthCache<Row extends object = Record<string, unknown>> {
  private readonly entries = new Map<string, { row: Row; expiresAt: number }>();
  /** Bumped by every invalidation: a read that started before one must not be stored after it. */
  private generation = 0;
  private readonly listener: ChannelListener;
  private readonly ttlMs: number;
  private readonly maxEntries: number;

  constructor(databaseUrl: string, ttlMs: number, maxEntries = 10_000) {
    this.listener = new ChannelListener(databaseUrl, 'auth_changed', () => this.invalidate());
    this.ttlMs = ttlMs;
    this.maxEntries = maxEntries;
  }

  /** Resolves once listening, or once the first attempt failed (the cache then stays off and retries). */
  start(): Promise<void> {
    return this.listener.start();
  }

  stop(): Promise<void> {
    return this.listener.stop();
  }

  private get listening(): boolean {
    return this.listener.listening;
  }

  /** Whether cached results may be served now. */
  get active(): boolean {
    return this.listening;
  }

  /** The current generation, taken before reading PostgreSQL and handed back to store(). */
  snapshot(): number {
    return this.generation;
  }

  read(key: string): Row | undefined {
    if (!this.listening) return undefined;
    const entry = this.entries.get(key);
    if (!entry) return undefined;
    if (entry.expiresAt <= Date.now()) {
      this.entries.delete(key);
      return undefined;
    }
    return entry.row;
  }

  store(key: string, row: Row, generation: number): void {
    if (!this.listening || generation !== this.generation) return;
    if (this.entries.size >= this.maxEntries) this.entries.clear();
    this.entries.set(key, { row, expiresAt: Date.now() + this.ttlMs });
  }

  invalidate(): void {
    this.generation++;
    this.entries.clear();
  }
}

/** The API process's cache, listening; null when AUTH_CACHE_SECONDS is 0. */
export async function startAuthCache(databaseUrl: string, seconds: number): Promise<AuthCache<KeyWithProject> | null> {
  if (seconds <= 0) return null;
  const cache = new AuthCache<KeyWithProject>(databaseUrl, seconds * 1000);
  await cache.start();
  return cache;
}
