// Values kept in the API process and dropped by PostgreSQL notifications instead of expiring: the flag
// definitions (api/flags/cache.ts) and the deletion suppressions (api/capture/suppression-cache.ts).
// Each change to what a cache holds notifies its channel with the projects it touched (`*`: all), and
// every API process LISTENs and drops those projects' entries. While the listening connection is down
// nothing is served from memory (every request reads PostgreSQL), so a notification lost meanwhile
// cannot keep a stale value served.
import { EventEmitter } from 'node:events';
import { ChannelListener } from './listener.ts';

/** Emits `invalidated` with the project ids a change touched, or 'all'. */
export class NotifiedCache<K, V> extends EventEmitter<{ invalidated: [projects: Set<number> | 'all'] }> {
  private readonly entries = new Map<K, V>();
  /** Reads in flight, shared by concurrent misses of one key (16 clients, one query). */
  private readonly pending = new Map<K, Promise<V>>();
  /** Bumped by every invalidation: a read that started before one must not be stored after it. */
  private generation = 0;
  private readonly listener: ChannelListener;
  /** The project an entry belongs to, which invalidations name. */
  private readonly projectOf: (key: K, value: V) => number;
  private readonly maxEntries: number;

  constructor(databaseUrl: string, channel: string, projectOf: (key: K, value: V) => number, maxEntries = 10_000) {
    super();
    this.projectOf = projectOf;
    this.maxEntries = maxEntries;
    this.listener = new ChannelListener(databaseUrl, channel, (payload) => this.notified(payload));
  }

  /** Resolves once listening, or once the first attempt failed (the cache then stays off and retries). */
  start(): Promise<void> {
    return this.listener.start();
  }

  stop(): Promise<void> {
    return this.listener.stop();
  }

  /** Whether entries may be served now. */
  get active(): boolean {
    return this.listener.listening;
  }

  /** The value of `key`: from memory while listening, else (and on a miss) from `load`. */
  get(key: K, load: () => Promise<V>): Promise<V> {
    if (!this.active) return load();
    const hit = this.entries.get(key);
    if (hit !== undefined) return Promise.resolve(hit);
    const inFlight = this.pending.get(key);
    if (inFlight) return inFlight;
    const generation = this.generation;
    const read = load().then(
      (value) => {
        if (this.pending.get(key) === read) this.pending.delete(key);
        if (this.active && generation === this.generation) {
          if (this.entries.size >= this.maxEntries) this.entries.clear();
          this.entries.set(key, value);
        }
        return value;
      },
      (error: unknown) => {
        if (this.pending.get(key) === read) this.pending.delete(key);
        throw error;
      },
    );
    this.pending.set(key, read);
    return read;
  }

  /** Drops the entries of `projects` (all when omitted). */
  invalidate(projects?: Set<number>): void {
    // Reads in flight may be of those projects (a key's project may be known only once read): none of
    // them is stored, and requests after the change must not join one.
    this.generation++;
    this.pending.clear();
    if (projects) {
      for (const [key, value] of this.entries) if (projects.has(this.projectOf(key, value))) this.entries.delete(key);
    } else {
      this.entries.clear();
    }
    this.emit('invalidated', projects ?? 'all');
  }

  /** A notification's payload: project ids, comma-separated, or `*` for all. */
  private notified(payload: string | undefined): void {
    const ids = payload && payload !== '*' ? payload.split(',').map(Number) : [];
    this.invalidate(ids.length && ids.every(Number.isSafeInteger) ? new Set(ids) : undefined);
  }
}
