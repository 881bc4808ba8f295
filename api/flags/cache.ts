// Flag definitions kept in the API process, per project API token, so /flags needs no round trip to
// PostgreSQL for them. As with the authentication cache (api/http/auth-cache.ts), correctness rests
// on invalidation, not expiry: migration 0023 makes every change to the tables flag evaluation reads
// (feature_flag, experiment_holdout, cohort, a project's token or existence) notify
// `flag_definitions_changed` with the projects it touched, whoever makes it; each API process LISTENs
// and drops those projects' entries. While the listening connection is down the cache is off (every
// request reads PostgreSQL), so a notification lost meanwhile cannot keep stale flags served.
// A change made on another connection is seen once its notification arrives (commit + well under a
// millisecond typically, a few ms on a loaded machine), as for the authentication cache.
import type { EntityManager } from '@mikro-orm/postgresql';
import { NotifiedCache } from '../http/notified-cache.ts';
import { projectByApiToken } from '../http/project-token.ts';
import { prepareFlags, type ProjectFlags } from '../../shared/flags/index.ts';
import { activeFlags } from '../../shared/flags/index.ts';

export type { PreparedFlag, ProjectFlags } from '../../shared/flags/index.ts';

export const FLAG_DEFINITIONS_CHANNEL = 'flag_definitions_changed';

/** Per project API token: its project's flags (see NotifiedCache for how entries are dropped). */
export class FlagCache extends NotifiedCache<string, ProjectFlags> {
  constructor(databaseUrl: string, maxEntries = 10_000) {
    super(databaseUrl, FLAG_DEFINITIONS_CHANNEL, (_token, entry) => entry.projectId, maxEntries);
  }
}

/** The API process's flag cache, listening (or retrying to) on `databaseUrl`, a direct connection. */
export async function startFlagCache(databaseUrl: string): Promise<FlagCache> {
  const cache = new FlagCache(databaseUrl);
  await cache.start();
  return cache;
}

/**
 * The project behind an SDK's project token and its active flags: from `cache` when it may serve,
 * else two queries (`em` is called only then). An unknown token is a 401 (never cached: a new project may get it).
 */
export async function projectFlags(
  em: () => EntityManager,
  cache: FlagCache | null | undefined,
  token: unknown,
): Promise<ProjectFlags> {
  const load = async (): Promise<ProjectFlags> => {
    const project = await projectByApiToken(em(), token);
    return { projectId: project.id, flags: prepareFlags(await activeFlags(em(), project.id)) };
  };
  // The cache key is the token as projectByApiToken looks it up; anything else it refuses.
  if (!cache || typeof token !== 'string') return load();
  return cache.get(token.trim(), load);
}
