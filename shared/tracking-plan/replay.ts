// Replaying quarantined events: each batch is claimed (rows locked, others' skipped), checked against the
// plan in force now, and those that pass are stored through the normal ingestion path in the same
// transaction that deletes them from the quarantine — so each is stored once, whatever runs beside it.
// Deletion suppressions and person deletions apply as if the events arrived now: an event of a distinct
// id suppressed, or whose person was deleted after the event was quarantined, is dropped (the person
// stays deleted).
import type { EntityManager } from '@mikro-orm/postgresql';
import { countDropped, directLookup, dropSuppressed } from '../deletions/index.ts';
import type { IngestEvent } from '../persons/index.ts';
import { type IngestionWarningInput, ingestEventsInTransaction } from '../ingestion/index.ts';
import type { Deps } from '../platform/deps.ts';
import { JOBS, type JobData } from '../platform/jobs.ts';
import { enqueueRowJobs, type Queues, requeueRowJobs, type RowJob } from '../platform/queues.ts';
import { type CompiledPlan, enforcePlan } from './plan.ts';
import {
  addViolationCounts,
  advanceReplay,
  claimQuarantined,
  deletedSince,
  findReplay,
  keepQuarantined,
  type QuarantineFilter,
  readQuarantined,
  releaseQuarantined,
  unfinishedReplayIds,
} from './store.ts';
import { loadPlan } from './service.ts';

/** Quarantined events claimed and stored per transaction. */
export const REPLAY_BATCH = 5000;

export interface ReplayCounts {
  selected: number;
  stored: number;
  still_violating: number;
  dropped: number;
}

export const noCounts = (): ReplayCounts => ({ selected: 0, stored: 0, still_violating: 0, dropped: 0 });

interface Checked {
  counts: ReplayCounts;
  store: { id: string; event: IngestEvent }[];
  keep: { id: string; violations: ReturnType<typeof enforcePlan>['quarantined'][number]['violations'] }[];
  release: string[];
  warnings: IngestionWarningInput[];
  suppressedRows: Map<string, number>;
  violationCounts: ReturnType<typeof enforcePlan>['counts'];
}

/** What a batch of quarantined rows would become under `plan` now (reads only). */
async function check(
  em: EntityManager,
  projectId: number,
  plan: CompiledPlan | null,
  rows: Awaited<ReturnType<typeof claimQuarantined>>,
): Promise<Checked> {
  const done: Checked = {
    counts: { ...noCounts(), selected: rows.length },
    store: [],
    keep: [],
    release: [],
    warnings: [],
    suppressedRows: new Map(),
    violationCounts: new Map(),
  };
  if (rows.length === 0) return done;
  const earliest = new Date(Math.min(...rows.map((r) => new Date(r.quarantined_at).getTime())));
  const deleted = await deletedSince(em, projectId, [...new Set(rows.map((r) => r.distinct_id))], earliest);
  const idOf = new Map<string, string>();
  const candidates: IngestEvent[] = [];
  for (const r of rows) {
    const deletedAt = deleted.get(r.distinct_id);
    if (deletedAt !== undefined && deletedAt > new Date(r.quarantined_at)) {
      done.release.push(r.id);
      done.counts.dropped++;
      done.warnings.push({
        type: 'event_dropped_person_deleted',
        eventUuid: r.uuid,
        distinctId: r.distinct_id,
        details: {
          eventName: r.event,
          reason: 'its person was deleted after the event was quarantined; not replayed (the person stays deleted)',
        },
      });
      continue;
    }
    idOf.set(r.uuid, r.id);
    candidates.push({
      uuid: r.uuid,
      event: r.event,
      distinctId: r.distinct_id,
      properties: r.properties,
      timestamp: new Date(r.timestamp),
    });
  }
  const suppressed = await dropSuppressed(em, directLookup, projectId, candidates);
  done.suppressedRows = suppressed.dropped;
  done.warnings.push(...suppressed.warnings);
  const keptUuids = new Set(suppressed.kept.map((e) => e.uuid));
  for (const e of candidates)
    if (!keptUuids.has(e.uuid)) {
      done.release.push(idOf.get(e.uuid)!);
      done.counts.dropped++;
    }
  if (plan === null) {
    for (const e of suppressed.kept) done.store.push({ id: idOf.get(e.uuid)!, event: e });
  } else {
    const enforced = enforcePlan(plan, suppressed.kept);
    done.violationCounts = enforced.counts;
    // Still violating: stays in quarantine (no new warning: the event's first one stands).
    for (const h of enforced.quarantined) done.keep.push({ id: idOf.get(h.event.uuid)!, violations: h.violations });
    for (const h of enforced.dropped) done.release.push(idOf.get(h.event.uuid)!);
    for (const e of enforced.kept) done.store.push({ id: idOf.get(e.uuid)!, event: e });
    done.warnings.push(...enforced.warnings.filter((w) => w.type !== 'event_quarantined_by_plan'));
    done.counts.dropped += enforced.dropped.length;
  }
  done.counts.stored = done.store.length;
  done.counts.still_violating = done.keep.length;
  return done;
}

/**
 * One batch of a replay, in the caller's transaction `tx`: claims up to `limit` rows after `afterId`,
 * stores those that pass, releases those dropped, keeps the rest with their violations as of now.
 * Returns the counts, the last id claimed (null: nothing left) and what to run after the commit.
 */
export async function replayBatch(
  tx: EntityManager,
  projectId: number,
  plan: CompiledPlan | null,
  filter: QuarantineFilter,
  afterId: string,
  limit = REPLAY_BATCH,
): Promise<{ counts: ReplayCounts; lastId: string | null; afterCommit: () => Promise<void> }> {
  const rows = await claimQuarantined(tx, projectId, filter, afterId, limit);
  if (rows.length === 0) return { counts: noCounts(), lastId: null, afterCommit: async () => undefined };
  const checked = await check(tx, projectId, plan, rows);
  await releaseQuarantined(tx, [...checked.release, ...checked.store.map((s) => s.id)]);
  if (plan !== null) await keepQuarantined(tx, plan.version, checked.keep);
  const remember = await ingestEventsInTransaction(
    tx,
    projectId,
    checked.store.map((s) => s.event),
    checked.warnings,
  );
  if (plan !== null) await addViolationCounts(tx, projectId, plan.version, checked.violationCounts.values());
  return {
    counts: checked.counts,
    lastId: rows[rows.length - 1].id,
    afterCommit: async () => {
      remember();
      if (checked.suppressedRows.size > 0) await countDropped(tx.fork(), checked.suppressedRows).catch(() => undefined);
    },
  };
}

/** Every batch of a filter in the caller's transaction (a small replay, answered in the request). */
export async function replayAll(
  tx: EntityManager,
  projectId: number,
  filter: QuarantineFilter,
): Promise<{ counts: ReplayCounts; afterCommit: () => Promise<void> }> {
  const plan = await loadPlan(tx, projectId);
  const total = noCounts();
  const after: (() => Promise<void>)[] = [];
  let afterId = '0';
  for (;;) {
    const batch = await replayBatch(tx, projectId, plan, filter, afterId);
    if (batch.lastId === null) break;
    afterId = batch.lastId;
    after.push(batch.afterCommit);
    for (const key of Object.keys(total) as (keyof ReplayCounts)[]) total[key] += batch.counts[key];
  }
  return {
    counts: total,
    afterCommit: async () => {
      for (const run of after) await run();
    },
  };
}

/** A dry run: what a replay would do now to the first `sampleLimit` selected events (changes nothing). */
export async function replayDryRun(
  em: EntityManager,
  projectId: number,
  filter: QuarantineFilter,
  sampleLimit: number,
) {
  const plan = await loadPlan(em, projectId);
  const rows = await readQuarantined(em, projectId, filter, sampleLimit);
  const checked = await check(em, projectId, plan, rows);
  return checked.counts;
}

/**
 * The worker's job: one replay row, batch after batch, each in a transaction of its own that also adds
 * its counts to the row. Run again (a retry), it goes on: what was stored is no longer quarantined.
 */
export async function replayQuarantineJob(
  job: { data: { replayId: string } },
  deps: Pick<Deps, 'orm' | 'logger'>,
): Promise<ReplayCounts> {
  const em = deps.orm.em.fork();
  const replay = await findReplay(em, job.data.replayId);
  if (!replay || replay.status === 'done') return noCounts();
  const filter = filterOf(replay.filter, replay.created_at);
  const plan = await loadPlan(em, replay.project_id);
  const total = noCounts();
  let afterId = '0';
  try {
    for (;;) {
      let lastId: string | null = null;
      let afterCommit: () => Promise<void> = async () => undefined;
      await em.fork().transactional(async (tx) => {
        const batch = await replayBatch(tx, replay.project_id, plan, filter, afterId);
        lastId = batch.lastId;
        afterCommit = batch.afterCommit;
        await advanceReplay(tx, replay.id, batch.counts, lastId === null ? 'done' : 'running');
        for (const key of Object.keys(total) as (keyof ReplayCounts)[]) total[key] += batch.counts[key];
      });
      await afterCommit();
      if (lastId === null) break;
      afterId = lastId;
    }
  } catch (error) {
    await advanceReplay(em.fork(), replay.id, noCounts(), 'failed', (error as Error).message);
    throw error;
  }
  deps.logger.info({ replayId: replay.id, ...total }, 'quarantine replay done');
  return total;
}

/** A replay row's stored filter as the store takes it; events quarantined after the replay began are not its. */
export function filterOf(filter: Record<string, unknown>, until: Date): QuarantineFilter {
  return {
    event: typeof filter.event === 'string' ? filter.event : undefined,
    since: typeof filter.since === 'string' ? new Date(filter.since) : undefined,
    until,
  };
}

/** A replay's job: one per tracking_plan_replay row, jobId replay-<id>. */
export const REPLAY_QUARANTINE_JOB: RowJob = {
  what: 'quarantine replay',
  name: JOBS.replayQuarantine.name,
  jobId: (id) => `replay-${id}`,
  data: (id) => ({ replayId: id }) satisfies JobData['replayQuarantine'],
};

/** Hands a replay to the worker now; never throws (Redis away: the reconciler enqueues it later). */
export const enqueueReplay = (queues: Queues, replayId: string) =>
  enqueueRowJobs(queues.maintenance, REPLAY_QUARANTINE_JOB, [replayId]);

/** Seconds a replay may wait queued, or stay running, before the reconciler makes sure it has a live job. */
const RECONCILE_GRACE_SECONDS = 60;

/**
 * The worker reconciler's part: replays queued or running for over a minute without a live job (Redis
 * was away when the request enqueued it, or the job was lost) get one.
 */
export async function reconcileReplays(deps: Pick<Deps, 'orm' | 'logger' | 'queues'>): Promise<{ enqueued: number }> {
  const em = deps.orm.em.fork();
  const due = (among?: string[]) => unfinishedReplayIds(em, RECONCILE_GRACE_SECONDS, among);
  const enqueued = await requeueRowJobs(deps.queues.maintenance, REPLAY_QUARANTINE_JOB, await due(), due);
  if (enqueued.length) deps.logger.info({ enqueued: enqueued.length }, 'reconciler enqueued quarantine replays');
  return { enqueued: enqueued.length };
}
