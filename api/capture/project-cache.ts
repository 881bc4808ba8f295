// The project behind each SDK project API token, kept in the API process so capture needs no round trip
// to PostgreSQL for it on every request (/flags keeps it with its definitions: api/flags/cache.ts).
// Correctness rests on invalidation, as for the flag cache: migration 0023 makes a project's token
// change, insert or delete notify `flag_definitions_changed` with its id, whoever makes it; each API
// process LISTENs and drops that project's entries. While the listening connection is down the cache is
// off and every request reads PostgreSQL. Only the project's id is kept: capture needs nothing else.
import type { EntityManager } from '@mikro-orm/postgresql';
import { NotifiedCache } from '../http/notified-cache.ts';
import { projectByApiToken } from '../http/project-token.ts';
import { FLAG_DEFINITIONS_CHANNEL } from '../flags/cache.ts';

/** Per project API token: its project's id (see NotifiedCache for how entries are dropped). */
export class ProjectCache extends NotifiedCache<string, number> {
  constructor(databaseUrl: string, maxEntries = 10_000) {
    super(databaseUrl, FLAG_DEFINITIONS_CHANNEL, (_token, projectId) => projectId, maxEntries);
  }
}

/** The API process's project cache, listening (or retrying to) on `databaseUrl`, a direct connection. */
export async function startProjectCache(databaseUrl: string): Promise<ProjectCache> {
  const cache = new ProjectCache(databaseUrl);
  await cache.start();
  return cache;
}

/**
 * The id of the project an SDK's token belongs to: from `cache` when it may serve, else one query. An
 * unknown token is a 401 (never cached: a new project may get it).
 */
export function projectIdByApiToken(
  em: EntityManager,
  cache: ProjectCache | null | undefined,
  token: unknown,
): Promise<number> {
  const load = async () => (await projectByApiToken(em, token)).id;
  // The cache key is the token as projectByApiToken looks it up; anything else it refuses.
  if (!cache || typeof token !== 'string') return load();
  return cache.get(token.trim(), load);
}
