// Authentication results kept in the API process, so a project request costs one round trip to
// PostgreSQL instead of two. Correctness rests on invalidation, not on expiry: migration 0017 makes
// every change to keys, users, memberships and projects notify `auth_changed`, whichever process
// makes it, and each API process LISTENs and drops its whole cache on a notification. While the
// listening connection is down the cache is off (every request reads PostgreSQL), so a lost
// notification cannot keep a revoked key working. The expiry only bounds memory of idle keys.
import pg from 'pg';
import { logger } from '../../shared/logger.ts';

const MAX_RECONNECT_DELAY_MS = 30_000;

export class AuthCache {
  private readonly entries = new Map<string, { row: Record<string, unknown>; expiresAt: number }>();
  /** Bumped by every invalidation: a read that started before one must not be stored after it. */
  private generation = 0;
  private listening = false;
  private client: pg.Client | null = null;
  private stopped = false;
  private reconnectDelayMs = 1000;
  private reconnectTimer: NodeJS.Timeout | undefined;

  private readonly databaseUrl: string;
  private readonly ttlMs: number;
  private readonly maxEntries: number;

  constructor(databaseUrl: string, ttlMs: number, maxEntries = 10_000) {
    this.databaseUrl = databaseUrl;
    this.ttlMs = ttlMs;
    this.maxEntries = maxEntries;
  }

  /** Resolves once listening, or once the first attempt failed (the cache then stays off and retries). */
  async start(): Promise<void> {
    await this.connect();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.reconnectTimer);
    this.listening = false;
    this.invalidate();
    const client = this.client;
    this.client = null;
    await client?.end().catch(() => undefined);
  }

  /** Whether cached results may be served now. */
  get active(): boolean {
    return this.listening;
  }

  /** The current generation, taken before reading PostgreSQL and handed back to store(). */
  snapshot(): number {
    return this.generation;
  }

  read(key: string): Record<string, unknown> | undefined {
    if (!this.listening) return undefined;
    const entry = this.entries.get(key);
    if (!entry) return undefined;
    if (entry.expiresAt <= Date.now()) {
      this.entries.delete(key);
      return undefined;
    }
    return entry.row;
  }

  store(key: string, row: Record<string, unknown>, generation: number): void {
    if (!this.listening || generation !== this.generation) return;
    if (this.entries.size >= this.maxEntries) this.entries.clear();
    this.entries.set(key, { row, expiresAt: Date.now() + this.ttlMs });
  }

  invalidate(): void {
    this.generation++;
    this.entries.clear();
  }

  private async connect(): Promise<void> {
    const client = new pg.Client({ connectionString: this.databaseUrl });
    // A failing connection may report through 'error', 'end' and the rejected connect: act once.
    let gone = false;
    const lost = (error?: unknown) => {
      if (gone) return;
      gone = true;
      this.lost(client, error);
    };
    client.on('notification', () => this.invalidate());
    client.on('error', lost);
    client.on('end', () => lost());
    try {
      await client.connect();
      await client.query('listen auth_changed');
    } catch (error) {
      lost(error);
      return;
    }
    if (this.stopped) {
      await client.end().catch(() => undefined);
      return;
    }
    this.client = client;
    this.reconnectDelayMs = 1000;
    this.invalidate(); // changes made while not listening
    this.listening = true;
  }

  /** Cache off at once, then a new listener after a growing delay. */
  private lost(client: pg.Client, error?: unknown): void {
    this.listening = false;
    this.invalidate();
    if (this.client === client) this.client = null;
    client.end().catch(() => undefined);
    if (this.stopped) return;
    logger.warn({ err: error instanceof Error ? error.message : undefined, retryInMs: this.reconnectDelayMs }, 'auth cache off: auth_changed listener lost');
    this.reconnectTimer = setTimeout(() => void this.connect(), this.reconnectDelayMs);
    this.reconnectTimer.unref();
    this.reconnectDelayMs = Math.min(this.reconnectDelayMs * 2, MAX_RECONNECT_DELAY_MS);
  }
}

/** The API process's cache, listening; null when AUTH_CACHE_SECONDS is 0. */
export async function startAuthCache(databaseUrl: string, seconds: number): Promise<AuthCache | null> {
  if (seconds <= 0) return null;
  const cache = new AuthCache(databaseUrl, seconds * 1000);
  await cache.start();
  return cache;
}
