// The deletion suppressions capture checks (shared/deletions/suppression.ts), kept per project in the
// API process so that a project without any costs one indexed query per process and change, not one
// per request. As with the flag cache (api/flags/cache.ts), correctness rests on invalidation:
// migration 0049 makes every insert, delete and lift of a suppression notify
// `deletion_suppression_changed` with its project, whichever process makes it; each API process
// LISTENs and drops that project's entry. While the listening connection is down the cache is off
// and every request reads PostgreSQL. The process that makes a change drops its own entry at once,
// after the commit (`invalidate`), so its next request sees it without waiting for the notification;
// another process sees it once the notification arrives (typically well under a millisecond after
// the commit, a few ms on a loaded machine).
import { EventEmitter } from 'node:events';
import type { EntityManager } from '@mikro-orm/postgresql';
import { ChannelListener } from '../http/listener.ts';
import {
  activeSuppressions,
  projectSuppressions,
  type SuppressedIds,
  type SuppressionLookup,
} from '../../shared/deletions/suppression.ts';

export const SUPPRESSION_CHANNEL = 'deletion_suppression_changed';

/** A project's suppressions held in memory up to this many; beyond, each request looks up its own ids. */
export const MAX_HELD_PER_PROJECT = 10_000;

/** A project's entry: its active suppressions, or 'many' (look up per request). */
type Entry = SuppressedIds | 'many';

/** Emits `invalidated` with the project ids a change touched, or 'all'. */
export class SuppressionCache
  extends EventEmitter<{ invalidated: [projects: Set<number> | 'all'] }>
  implements SuppressionLookup
{
  private readonly entries = new Map<number, Entry>();
  private readonly pending = new Map<number, Promise<Entry>>();
  /** Bumped by every invalidation: a read that started before one must not be stored after it. */
  private generation = 0;
  private readonly listener: ChannelListener;
  private readonly maxProjects: number;
  private readonly maxHeldPerProject: number;

  constructor(databaseUrl: string, limits: { maxProjects?: number; maxHeldPerProject?: number } = {}) {
    super();
    this.listener = new ChannelListener(databaseUrl, SUPPRESSION_CHANNEL, (payload) => this.notified(payload));
    this.maxProjects = limits.maxProjects ?? 10_000;
    this.maxHeldPerProject = limits.maxHeldPerProject ?? MAX_HELD_PER_PROJECT;
  }

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

  async suppressed(em: EntityManager, projectId: number, distinctIds: string[]): Promise<SuppressedIds> {
    if (!this.active) return activeSuppressions(em, projectId, distinctIds);
    const entry = this.entries.get(projectId) ?? (await this.load(em, projectId));
    if (entry === 'many') return activeSuppressions(em, projectId, distinctIds);
    const found: SuppressedIds = new Map();
    if (entry.size === 0) return found;
    for (const id of distinctIds) {
      const row = entry.get(id);
      if (row !== undefined) found.set(id, row);
    }
    return found;
  }

  /** One read per project shared by concurrent requests; stored only if nothing changed meanwhile. */
  private load(em: EntityManager, projectId: number): Promise<Entry> {
    const inFlight = this.pending.get(projectId);
    if (inFlight) return inFlight;
    const generation = this.generation;
    const read: Promise<Entry> = projectSuppressions(em, projectId, this.maxHeldPerProject)
      .then((held) => held ?? ('many' as const))
      .then(
        (entry) => {
          if (this.pending.get(projectId) === read) this.pending.delete(projectId);
          if (this.active && generation === this.generation) {
            if (this.entries.size >= this.maxProjects) this.entries.clear();
            this.entries.set(projectId, entry);
          }
          return entry;
        },
        (error: unknown) => {
          if (this.pending.get(projectId) === read) this.pending.delete(projectId);
          throw error;
        },
      );
    this.pending.set(projectId, read);
    return read;
  }

  /** Drops the entries of `projects` (all when omitted). */
  invalidate(projects?: Set<number>): void {
    this.generation++;
    this.pending.clear();
    if (projects) for (const id of projects) this.entries.delete(id);
    else this.entries.clear();
    this.emit('invalidated', projects ?? 'all');
  }

  /** A notification's payload: a project id, or `*` for all. */
  private notified(payload: string | undefined): void {
    const ids = payload && payload !== '*' ? payload.split(',').map(Number) : [];
    this.invalidate(ids.length && ids.every(Number.isSafeInteger) ? new Set(ids) : undefined);
  }
}

/** The API process's suppression cache, listening (or retrying to) on `databaseUrl`, a direct connection. */
export async function startSuppressionCache(databaseUrl: string): Promise<SuppressionCache> {
  const cache = new SuppressionCache(databaseUrl);
  await cache.start();
  return cache;
}
