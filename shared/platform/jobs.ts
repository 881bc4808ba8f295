// Every job, declared once: its queue, its name and the data it carries. The worker registers a
// processor per job (worker/jobs/index.ts), schedules name jobs from here (shared/schedules.ts), and
// producers enqueue through enqueue(), so a job's name and data type cannot drift between them.
// This file imports no feature: features import it (schedules.ts, then shared/deletions/schedule.ts).
import type { JobsOptions, Queue } from 'bullmq';

/** Every queue, by the key code uses and the name Redis, metrics and the dashboard show. */
export const QUEUE_NAMES = {
  /** One job per async_deletion row: events (weekly / off-peak) and recordings (as soon as possible). */
  deletions: 'deletions',
  /** Experiment result computation, scheduled daily and on demand. */
  experimentResults: 'experiment-results',
  /** Database upkeep: planner statistics of fast-growing tables, monthly event partitions. */
  maintenance: 'maintenance',
  /** One job per webhook_delivery row: a signed POST to a customer's URL, retried with backoff. */
  webhooks: 'webhooks',
} as const;

/** Every queue of QUEUE_NAMES, by key: the API's producers and the worker's own handles. */
export type Queues = Record<keyof typeof QUEUE_NAMES, Queue>;

export const JOBS = {
  /** One deletion request (an async_deletion row); jobId deletion-<id>. */
  deletion: { queue: 'deletions', name: 'delete' },
  /** One scrub by content (an event_scrub row); jobId scrub-<id>. */
  scrub: { queue: 'deletions', name: 'scrub' },
  /** A deletion window opens: its pending requests are released. */
  releaseDeletions: { queue: 'deletions', name: 'release-batch' },
  /** On demand; each worker also reconciles on its own timer. */
  reconcileDeletions: { queue: 'deletions', name: 'reconcile' },
  experimentResults: { queue: 'experimentResults', name: 'compute' },
  /** Every 5 minutes: guardrails of running experiments; a harmful one trips the circuit breaker. */
  guardrailCheck: { queue: 'experimentResults', name: 'guardrail-check' },
  /** Hourly: bandit experiments whose interval has passed get new rollout percentages (Thompson sampling). */
  banditReallocation: { queue: 'experimentResults', name: 'bandit-reallocation' },
  refreshStatistics: { queue: 'maintenance', name: 'refresh-statistics' },
  /** Daily: event partitions ahead; the purges of ingestion warnings and webhook deliveries (30 days), of the read-access log (ACCESS_LOG_RETENTION_DAYS) and of quarantined events (QUARANTINE_RETENTION_DAYS). */
  ensureEventPartitions: { queue: 'maintenance', name: 'ensure-event-partitions' },
  /** VACUUM (ANALYZE) of one table after a mass delete; deduplicated per table (enqueueVacuums). */
  vacuumTable: { queue: 'maintenance', name: 'vacuum-table' },
  /** Nightly in the off-peak window: every project's data past its retention line (shared/retention/). */
  retention: { queue: 'maintenance', name: 'retention' },
  /** One webhook delivery (a webhook_delivery row): a signed POST; jobId webhook-delivery-<id>. */
  webhookDelivery: { queue: 'webhooks', name: 'deliver' },
  /** New events and distinct-id changes to ClickHouse (EVENT_STORE=clickhouse only). */
  shipEvents: { queue: 'maintenance', name: 'ship-events' },
  /** A large quarantine replay (a tracking_plan_replay row); jobId replay-<id>. */
  replayQuarantine: { queue: 'maintenance', name: 'replay-quarantine' },
  /** One access export (an access_export row): its archive built; jobId access-export-<id>. */
  accessExport: { queue: 'deletions', name: 'access-export' },
  /** Hourly: access-export archives past ACCESS_EXPORT_TTL_HOURS removed, the removal recorded. */
  expireAccessExports: { queue: 'maintenance', name: 'expire-access-exports' },
} as const satisfies Record<string, { queue: keyof typeof QUEUE_NAMES; name: string }>;

export type JobKind = keyof typeof JOBS;

/** The data each job carries: ids and options only; the source of truth is in PostgreSQL. */
export interface JobData {
  deletion: { deletionId: string };
  scrub: { scrubId: string };
  /**
   * The window that opened: shared/deletions/schedule.ts's ScheduledDeletionMode, said here so this
   * contract imports no feature; worker/jobs/index.ts binds the job's processor to it.
   */
  releaseDeletions: { mode: 'weekly' | 'off_peak' };
  reconcileDeletions: Record<string, never>;
  /** No id: every running experiment. */
  experimentResults: { experimentId?: number };
  /** No id: every running experiment with guardrails. */
  guardrailCheck: { experimentId?: number };
  /** No id: every running bandit experiment whose interval has passed; `force`: due now. */
  banditReallocation: { experimentId?: number; force?: boolean };
  refreshStatistics: { minChangedRows?: number; minDeadRows?: number };
  ensureEventPartitions: { monthsAhead?: number };
  vacuumTable: { table: string };
  retention: Record<string, never>;
  webhookDelivery: { deliveryId: string };
  shipEvents: Record<string, never>;
  replayQuarantine: { replayId: string };
  accessExport: { exportId: string };
  expireAccessExports: Record<string, never>;
}

export function enqueue<K extends JobKind>(queues: Queues, kind: K, data: JobData[K], opts?: JobsOptions) {
  return queues[JOBS[kind].queue].add(JOBS[kind].name, data, opts);
}
