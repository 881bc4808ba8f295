// The nightly retention job (scheduler `retention-off-peak`, in the deletion off-peak window): every
// project's events and recordings past its retention line (shared/retention/run.ts).
import type { Job } from 'bullmq';
import type { JobData } from '../platform/jobs.ts';
import { runRetention } from './run.ts';
import type { EventStoreDeps } from '../events/index.ts';
import type { Deps } from '../platform/deps.ts';
import { enqueueVacuums } from '../platform/db/vacuum-job.ts';

/** What the worker hands this job: the platform's dependencies and the event store. */
type JobDeps = Deps & EventStoreDeps;

/**
 * How long a partition drop waits for the event table's lock (every event statement queues behind it
 * meanwhile), and how many times it tries before deleting the partition's rows by range instead.
 */
const DROP_LOCK_TIMEOUT_MS = 2_000;
const DROP_LOCK_ATTEMPTS = 10;

export async function enforceRetention(job: Job<JobData['retention']>, deps: JobDeps) {
  const em = deps.orm.em.fork();
  const started = Date.now();
  const result = await runRetention(em, new Date(), {
    chunk: deps.config.deletion.chunkSize,
    lockTimeoutMs: DROP_LOCK_TIMEOUT_MS,
    lockAttempts: DROP_LOCK_ATTEMPTS,
    jobId: job.id ?? null,
    events: deps.events, // with EVENT_STORE=clickhouse its copies go too
    onProgress: (removed) => job.updateProgress({ removed }),
    onDropSkipped: (partition, why) =>
      deps.logger.warn(
        { partition, why },
        why === 'busy'
          ? 'retention: no lock on the event table to drop the partition; its rows past their lines are deleted instead'
          : 'retention: the partition now holds rows another project keeps; its rows past their lines are deleted instead',
      ),
  });
  const removed = result.projects.reduce((sum, p) => sum + p.events + p.recordings + p.snapshots, 0);
  deps.logger.info(
    {
      projects: result.projects.length,
      removed,
      partitionsDropped: result.partitionsDropped,
      ms: Date.now() - started,
    },
    'retention run completed',
  );
  if (removed > deps.config.maintenance.vacuumDeadRows && result.tablesDeletedFrom.length > 0)
    await enqueueVacuums(deps, result.tablesDeletedFrom);
  // Per project counts are in retention_run (GET …/retention/runs/); the job keeps a summary.
  return {
    projects: result.projects.length,
    removed,
    partitionsDropped: result.partitionsDropped,
    dropMs: result.dropMs,
  };
}
