// Each project's tracking plan, compiled, kept in the API process so capture checks events without a
// round trip to PostgreSQL; a project without a plan is kept too (as null), so the no-plan path costs a
// map lookup. As with the flag cache (api/flags/cache.ts), correctness rests on invalidation: migration
// 0061 makes every new plan version (or one deleted) notify `tracking_plan_changed` with its project,
// whichever process makes it; each API process LISTENs and drops that project's entry, and the process
// that makes a change drops its own at once after the commit. While the listening connection is down
// the cache is off and capture reads PostgreSQL (one query per request).
import type { EntityManager } from '@mikro-orm/postgresql';
import { NotifiedCache } from '../http/notified-cache.ts';
import { type CompiledPlan, loadPlan } from '../../shared/tracking-plan/index.ts';

export const TRACKING_PLAN_CHANNEL = 'tracking_plan_changed';

/** Per project: its plan in force, compiled, or null (see NotifiedCache for how entries are dropped). */
export class PlanCache extends NotifiedCache<number, CompiledPlan | null> {
  constructor(databaseUrl: string, maxEntries = 10_000) {
    super(databaseUrl, TRACKING_PLAN_CHANNEL, (projectId) => projectId, maxEntries);
  }
}

/** The API process's plan cache, listening (or retrying to) on `databaseUrl`, a direct connection. */
export async function startPlanCache(databaseUrl: string): Promise<PlanCache> {
  const cache = new PlanCache(databaseUrl);
  await cache.start();
  return cache;
}

/** The plan in force for a project: from `cache` when it may serve, else read and compiled. */
export function planOf(
  em: EntityManager,
  cache: PlanCache | null | undefined,
  projectId: number,
): Promise<CompiledPlan | null> {
  const load = () => loadPlan(em, projectId);
  return cache ? cache.get(projectId, load) : load();
}
