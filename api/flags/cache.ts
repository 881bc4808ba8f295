// Flag definitions kept in the API process, per project API token, so /flags needs no round trip to
// PostgreSQL for them. As with the authentication cache (api/http/auth-cache.ts), correctness rests
// on invalidation, not expiry: migration 0023 makes every change to the tables flag evaluation reads
// (feature_flag, experiment_holdout, cohort, a project's token or existence) notify
// `flag_definitions_changed` with the projects it touched, whoever makes it; each API process LISTENs
// and drops those projects' entries. While the listening connection is down the cache is off (every
// request reads PostgreSQL), so a notification lost meanwhile cannot keep stale flags served.
// A change made on another connection is seen once its notification arrives (commit + well under a
// millisecond typically, a few ms on a loaded machine), as for the authentication cache.
import { EventEmitter } from 'node:events';
import { ChannelListener } from '../http/listener.ts';
import type { StoredFlag } from '../../shared/flags/store.ts';

export const FLAG_DEFINITIONS_CHANNEL = 'flag_definitions_changed';

/** A stored flag with what a request needs to know before evaluating it, worked out once per load. */
export interface PreparedFlag extends StoredFlag {
  /** Person properties its conditions read. */
  personKeys: string[];
}

/** What /flags needs of a project: its id and its active flags, ready to evaluate. */
export interface ProjectFlags {
  projectId: number;
  flags: PreparedFlag[];
}

/** Emits `invalidated` with the project ids a change touched, or 'all'. */
export class FlagCache extends EventEmitter<{ invalidated: [projects: Set<number> | 'all'] }> {
  private readonly entries = new Map<string, ProjectFlags>();
  /** Reads in flight, shared by concurrent misses of one token (16 clients, one query). */
  private readonly pending = new Map<string, Promise<ProjectFlags>>();
  /** Bumped by every invalidation: a read that started before one must not be stored after it. */
  private generation = 0;
  private readonly listener: ChannelListener;
  private readonly maxEntries: number;

  constructor(databaseUrl: string, maxEntries = 10_000) {
    super();
    this.listener = new ChannelListener(databaseUrl, FLAG_DEFINITIONS_CHANNEL, (payload) => this.notified(payload));
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

  /** Whether cached definitions may be served now. */
  get active(): boolean {
    return this.listening;
  }

  /** The flags for `token`: from memory while listening, else (and on a miss) from `load`. */
  get(token: string, load: () => Promise<ProjectFlags>): Promise<ProjectFlags> {
    if (!this.listening) return load();
    const hit = this.entries.get(token);
    if (hit) return Promise.resolve(hit);
    const inFlight = this.pending.get(token);
    if (inFlight) return inFlight;
    const generation = this.generation;
    const read = load().then(
      (value) => {
        if (this.pending.get(token) === read) this.pending.delete(token);
        if (this.listening && generation === this.generation) {
          if (this.entries.size >= this.maxEntries) this.entries.clear();
          this.entries.set(token, value);
        }
        return value;
      },
      (error: unknown) => {
        if (this.pending.get(token) === read) this.pending.delete(token);
        throw error;
      },
    );
    this.pending.set(token, read);
    return read;
  }

  /** Drops the entries of `projects` (all when omitted). */
  invalidate(projects?: Set<number>): void {
    // Reads in flight may be of those projects (a token's project is known only once read): none of
    // them is stored, and requests after the change must not join one.
    this.generation++;
    this.pending.clear();
    if (projects) {
      for (const [token, entry] of this.entries) if (projects.has(entry.projectId)) this.entries.delete(token);
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

/** The API process's flag cache, listening (or retrying to) on `databaseUrl`, a direct connection. */
export async function startFlagCache(databaseUrl: string): Promise<FlagCache> {
  const cache = new FlagCache(databaseUrl);
  await cache.start();
  return cache;
}
