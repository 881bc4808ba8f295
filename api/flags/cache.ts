// Flag definitions kept in the API process, per project API token, so /flags needs no round trip to
// PostgreSQL for them. As with the authentication cache (api/http/auth-cache.ts), correctness rests
// on invalidation, not expiry: migration 0023 makes every change to the tables flag evaluation reads
// (feature_flag, experiment_holdout, cohort, a project's token or existence) notify
// `flag_definitions_changed` with the projects it touched, whoever makes it; each API process LISTENs
// and drops those projects' entries. While the listening connection is down the cache is off (every
// request reads PostgreSQL), so a notification lost meanwhile cannot keep stale flags served.
// A change made on another connection is seen once its notification arrives (commit + well under a
// millisecond typically, a few ms on a loaded machine), as for the authentication cache.
import { NotifiedCache } from '../http/notified-cache.ts';
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
