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
import type { EntityManager } from '@mikro-orm/postgresql';
import { NotifiedCache } from '../http/notified-cache.ts';
import {
  activeSuppressions,
  projectSuppressions,
  type SuppressedIds,
  type SuppressionLookup,
} from '../../shared/deletions/index.ts';

export const SUPPRESSION_CHANNEL = 'deletion_suppression_changed';

/** A project's suppressions held in memory up to this many; beyond, each request looks up its own ids. */
export const MAX_HELD_PER_PROJECT = 10_000;

/** A project's entry: its active suppressions, or 'many' (look up per request). */
type Entry = SuppressedIds | 'many';

/** Per project: its active suppressions (see NotifiedCache for how entries are dropped). */
export class SuppressionCache extends NotifiedCache<number, Entry> implements SuppressionLookup {
  private readonly maxHeldPerProject: number;

  constructor(databaseUrl: string, limits: { maxProjects?: number; maxHeldPerProject?: number } = {}) {
    super(databaseUrl, SUPPRESSION_CHANNEL, (projectId) => projectId, limits.maxProjects ?? 10_000);
    this.maxHeldPerProject = limits.maxHeldPerProject ?? MAX_HELD_PER_PROJECT;
  }

  async suppressed(em: EntityManager, projectId: number, distinctIds: string[]): Promise<SuppressedIds> {
    if (!this.active) return activeSuppressions(em, projectId, distinctIds);
    // One read per project shared by concurrent requests; stored only if nothing changed meanwhile.
    const entry = await this.get(
      projectId,
      async () => (await projectSuppressions(em, projectId, this.maxHeldPerProject)) ?? 'many',
    );
    if (entry === 'many') return activeSuppressions(em, projectId, distinctIds);
    const found: SuppressedIds = new Map();
    if (entry.size === 0) return found;
    for (const id of distinctIds) {
      const row = entry.get(id);
      if (row !== undefined) found.set(id, row);
    }
    return found;
  }
}

/** The API process's suppression cache, listening (or retrying to) on `databaseUrl`, a direct connection. */
export async function startSuppressionCache(databaseUrl: string): Promise<SuppressionCache> {
  const cache = new SuppressionCache(databaseUrl);
  await cache.start();
  return cache;
}
