// Archives past ACCESS_EXPORT_TTL_HOURS: each file removed, then its removal recorded (status
// expired, removed_at); a download afterwards answers 410. A file already gone counts as removed.
import type { Job } from 'bullmq';
import { rm } from 'node:fs/promises';
import type { Deps } from '../platform/deps.ts';
import { expiredExports, markExpired } from './store.ts';

/** Job body (scheduled, ACCESS_EXPORT_EXPIRE_CRON); `now` for tests. */
export async function expireAccessExports(_job: Job | null, deps: Pick<Deps, 'orm'>, now = new Date()) {
  const em = deps.orm.em.fork();
  let removed = 0;
  for (;;) {
    const due = await expiredExports(em, now);
    for (const e of due) {
      if (e.file_path) await rm(e.file_path, { force: true });
      if (await markExpired(em, e.id)) removed++;
    }
    if (due.length < 1000) break;
  }
  return { removed };
}
