// The scheduled side of deletions: the weekly batch (Sunday 05:00 UTC) and the nightly off-peak run
// release their pending requests and enqueue one job each; the reconciler re-enqueues any due
// request that has no live job (Redis was down when it was made, or its job was removed).
import type { Job } from 'bullmq';
import { deletionJobId, enqueueDeletions } from '../../shared/queues.ts';
import type { WorkerDeps } from '../deps.ts';

export async function releaseDeletionBatch(job: Job<{ mode: 'weekly' | 'off_peak' }>, deps: WorkerDeps): Promise<{ released: number }> {
  const mode = job.data?.mode;
  if (mode !== 'weekly' && mode !== 'off_peak') throw new Error(`unknown deletion batch mode ${JSON.stringify(mode)}`);
  const rows = await deps.orm.em
    .fork()
    .getConnection()
    .execute<{ id: string }[]>(
      `update async_deletion set released_at = now()
        where mode = ? and released_at is null and delete_verified_at is null and status = 'pending'
        returning id::text`,
      [mode],
    );
  await enqueueDeletions(deps.queues.deletions, rows.map((r) => r.id));
  deps.logger.info({ mode, released: rows.length }, 'deletion batch released');
  return { released: rows.length };
}

export async function reconcileDeletions(_job: Job | null, deps: WorkerDeps): Promise<{ enqueued: number }> {
  const due = await deps.orm.em
    .fork()
    .getConnection()
    .execute<{ id: string }[]>(
      `select id::text from async_deletion
        where delete_verified_at is null and (mode = 'immediate' or released_at is not null)
          and (status = 'pending' or (status = 'running' and lease_until < now()))
        order by id limit 10000`,
    );
  const missing: string[] = [];
  for (const { id } of due) {
    const job = await deps.queues.deletions.getJob(deletionJobId(id));
    if (!job) {
      missing.push(id);
      continue;
    }
    const state = await job.getState();
    // A finished job for an unfinished row (e.g. removed mid-way, or failed before a retry) is replaced.
    if (state === 'completed' || state === 'failed' || state === 'unknown') {
      await job.remove().catch(() => undefined);
      missing.push(id);
    }
  }
  await enqueueDeletions(deps.queues.deletions, missing);
  if (missing.length) deps.logger.info({ enqueued: missing.length }, 'reconciler enqueued deletion requests without a job');
  return { enqueued: missing.length };
}
