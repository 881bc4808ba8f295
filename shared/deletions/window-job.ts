// The scheduled side of deletions. The weekly batch (Sunday 05:00 UTC) and the nightly off-peak run
// release their pending requests and enqueue one job each; the reconciler, run by a timer in every
// worker process (not by a Redis-held schedule), releases any window's requests that were not
// released in time (Redis lost its schedulers) and gives every due request a live job: made while
// Redis was down, its job removed, or a failed request whose retry time has come.
import type { Job } from 'bullmq';
import { deletionCrons, lastWindowStart, type ScheduledDeletionMode } from './schedule.ts';
import { dueDeletionIds, purgeExpiredIdempotencyKeys, releaseDeletions } from './store.ts';
import { enqueueDeletions, requeueDeletions } from '../platform/queues.ts';
import { defaultSchedules, recordedSchedules } from '../platform/schedules.ts';
import type { EventStoreDeps } from '../events/index.ts';
import type { Deps } from '../platform/deps.ts';

/** What the worker hands this job: the platform's dependencies and the event store. */
type JobDeps = Deps & EventStoreDeps;

/** The window is open now (its cron fired, or an operator ran it): every pending request of the mode goes. */
export async function releaseDeletionBatch(
  job: Job<{ mode: ScheduledDeletionMode }>,
  deps: JobDeps,
): Promise<{ released: number; idempotencyKeysPurged?: number }> {
  const mode = job.data?.mode;
  if (mode !== 'weekly' && mode !== 'off_peak') throw new Error(`unknown deletion batch mode ${JSON.stringify(mode)}`);
  const em = deps.orm.em.fork();
  const ids = await releaseDeletions(em, mode, null);
  await enqueueDeletions(deps.queues.deletions, ids);
  deps.logger.info({ mode, released: ids.length }, 'deletion batch released');
  if (mode !== 'off_peak') return { released: ids.length };
  // The nightly window also drops the Idempotency-Keys past their 24 hours.
  const idempotencyKeysPurged = await purgeExpiredIdempotencyKeys(em);
  return { released: ids.length, idempotencyKeysPurged };
}

export async function reconcileDeletions(
  _job: Job | null,
  deps: JobDeps,
): Promise<{ released: number; enqueued: number }> {
  const em = deps.orm.em.fork();
  let released = 0;
  const { schedules } = await recordedSchedules(em, defaultSchedules(deps.config));
  for (const [mode, cron] of Object.entries(deletionCrons(schedules)) as [ScheduledDeletionMode, string][]) {
    // Requests made before the window last opened should have gone with it.
    const overdue = await releaseDeletions(em, mode, lastWindowStart(cron));
    if (overdue.length)
      deps.logger.warn({ mode, released: overdue.length }, 'released deletion requests their window missed');
    released += overdue.length;
  }
  const due = await dueDeletionIds(em);
  const enqueued = await requeueDeletions(deps.queues.deletions, due, (ids) => dueDeletionIds(em, ids));
  if (enqueued.length)
    deps.logger.info({ enqueued: enqueued.length }, 'reconciler enqueued deletion requests without a live job');
  return { released, enqueued: enqueued.length };
}
