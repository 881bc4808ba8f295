// One deletion request (an async_deletion row): a person's events or recordings. Idempotent: the
// row is claimed with a lease, deletes are bounded by the request's cutoff (only data that existed
// when it was asked for), run in short chunks, and the row completes only when nothing survives.
// Event deletions are batched: the job also claims the project's other released requests, so a
// weekly run over 1000 persons is a few large deletes (one per time window) rather than thousands.
// The lead removes the queued jobs of the requests it completed; one that runs anyway (active meanwhile)
// answers from a single read of its row.
// A batch that fails is retried request by request in the same run: one request that cannot be deleted
// fails alone (its own job's attempts, its own error) and the others complete.
import type { Job } from 'bullmq';
import { UnrecoverableError } from 'bullmq';
import type { EntityManager } from '@mikro-orm/postgresql';
import type { JobData } from '../platform/jobs.ts';
import { type Expression, type ExpressionBuilder, type SqlBool, sql } from 'kysely';
import { type DB, db } from '../platform/db/kysely.ts';
import { pgArray, rows } from '../platform/db/sql.ts';
import { deleteRecordingSessions } from '../events/index.ts';
import type { EventDeletionGroup } from '../events/index.ts';
import type { EventStoreDeps } from '../events/index.ts';
import type { Deps } from '../platform/deps.ts';
import { enqueueVacuums, eventPartitionsBetween } from '../platform/db/vacuum-job.ts';
import { config } from '../platform/config.ts';
import {
  addRowsDeleted,
  claimCompanions,
  claimDeletion,
  completeDeletions,
  deletionRequestsByIds,
  deletionState,
  dropLeases,
  dueDeletionIds,
  eventDeletionTargets,
  handBackCompanions,
  markDeletionFailed,
  renewLeases,
} from './store.ts';
import type { AsyncDeletionRow } from '../platform/entities/index.ts';
import { queueDeletionEvents } from './webhooks.ts';
import { enqueueWebhookDeliveries, removeDeletionJobs, requeueDeletions } from '../platform/queues.ts';
import {
  eventCounter,
  type EventCountTarget,
  deletionReceipts,
  receiptSigner,
  receiptStoresAfter,
  receiptVerifiedAt,
  recordRecordingsBefore,
  insertDeletionReceipts,
  addFoundBefore,
  type ReceiptSigner,
  signDeletionReceipts,
  type UnsignedReceipt,
} from './receipts.ts';
import { namedStatement } from '../platform/db/sql.ts';

/**
 * Another feature's rows of a person's distinct ids, held apart from the events (a tracking plan's
 * quarantine), which an event deletion removes with the events: bound by the worker (worker/jobs), so
 * this feature does not import the one that holds them. Each is a store of the receipt.
 */
export interface HeldEventStore {
  /** The receipt's store name. */
  name: string;
  /** The statement that counts what survived, with its parameters named (the receipt's verified_by). */
  statement: string;
  /** Deletes the rows of these distinct ids held by the cutoff; how many went, by distinct id. */
  delete(tx: EntityManager, projectId: number, distinctIds: string[], cutoff: string): Promise<Map<string, number>>;
  /** What `statement` counts over the groups: zero once they are deleted. */
  count(em: EntityManager, projectId: number, groups: EventDeletionGroup[]): Promise<number>;
}

/** What the worker hands this job: the platform's dependencies, the event store and the held stores. */
type JobDeps = Deps & EventStoreDeps & { heldEventStores?: readonly HeldEventStore[] };

/**
 * Rows per delete statement (events: aimed at; recordings: at most): short statements, the API stays
 * responsive. An event statement also pays an index descent per person and distinct id of the batch
 * (~15 ms for 1000 persons), so 100,000 rows (~150 ms a statement) keeps that a small share.
 */
export const DELETE_CHUNK = config.deletion.chunkSize;

export class DeletionBusyError extends Error {}

export async function deletePersonData(
  job: Job<JobData['deletion']>,
  deps: JobDeps,
  // Without receipts only for bench/deletion.ts's comparison: the worker always writes them.
  options: { receipts: boolean } = { receipts: true },
): Promise<{ deleted: number; requests?: number; skipped?: string }> {
  const id = job.data?.deletionId;
  if (typeof id !== 'string' || !/^\d+$/.test(id))
    throw new UnrecoverableError(`invalid deletion id ${JSON.stringify(id)}`);
  const em = deps.orm.em.fork();
  // Nothing to do (completed, cancelled, or held by a live batch: the usual case of a batch's companions):
  // answered from one read of the row, without a transaction. Anything else goes on to the claim, which
  // decides again under the row's lock (an orphaned request is taken over there).
  const state = await deletionState(em, id);
  if (!state) throw new UnrecoverableError(`deletion request ${id} does not exist`);
  if (state.status === 'completed') return { deleted: 0, skipped: 'already completed' };
  if (state.status === 'cancelled') return { deleted: 0, skipped: 'cancelled' };
  if (state.inLiveBatch) return { deleted: 0, skipped: `in the batch of deletion request ${state.claimedBy}` };
  // A claim holds leaseSeconds without renewal (renewed every third of it while the job runs); an event
  // deletion takes up to batchSize requests of its project in one pass (a bulk_delete makes up to 1000).
  const { leaseSeconds, batchSize } = deps.config.deletion;
  // The claim of the request and of its batch, with deletion.running for those it starts, in one transaction.
  const claim = await em.transactional(async (tx) => {
    const result = await claimDeletion(tx, id, leaseSeconds);
    if (!result?.claimed) return { result, companions: [], deliveries: [] };
    const companions =
      result.request.deletionType === 'person_events'
        ? await claimCompanions(tx, result.request, leaseSeconds, batchSize - 1)
        : [];
    const started = [{ id, previousStatus: result.previousStatus }, ...companions]
      .filter((c) => c.previousStatus !== 'running')
      .map((c) => c.id);
    const deliveries = await queueDeletionEvents(tx, result.request.projectId, 'running', started);
    return { result, companions: companions.map((c) => c.id), deliveries };
  });
  await enqueueWebhookDeliveries(deps.queues.webhooks, claim.deliveries);
  const result = claim.result;
  if (!result) throw new UnrecoverableError(`deletion request ${id} does not exist`);
  const row = result.request;
  if (!result.claimed) {
    if (row.status === 'completed') return { deleted: 0, skipped: 'already completed' };
    // Cancelled while pending: its cancel won against this claim.
    if (row.status === 'cancelled') return { deleted: 0, skipped: 'cancelled' };
    // Taken into another request's batch: that job finishes it, and if it dies the reconciler
    // re-enqueues this request once the lease runs out.
    if (row.claimedBy && row.claimedBy !== id)
      return { deleted: 0, skipped: `in the batch of deletion request ${row.claimedBy}` };
    // This request's own earlier attempt holds a live lease: retry later rather than delete twice.
    throw new DeletionBusyError(`deletion request ${id} is being processed by another worker`);
  }
  deps.logger.info(
    { deletionId: id, type: row.deletionType, projectId: row.projectId, jobId: job.id },
    'deletion started',
  );
  const started = Date.now();
  const batch = [id, ...claim.companions];
  let deleted = 0;
  // The event time the deleted rows span (epoch ms), for the partitions to vacuum.
  const deletedSpan = { from: Infinity, to: -Infinity };
  let renewedAt = Date.now();
  // After every chunk: progress for the dashboard, and the batch's leases renewed every third of their length.
  const chunkDone = async (n: number) => {
    deleted += n;
    await job.updateProgress({ deleted, requests: batch.length });
    if (Date.now() - renewedAt > (leaseSeconds * 1000) / 3) {
      await renewLeases(em, batch, leaseSeconds);
      renewedAt = Date.now();
    }
  };
  // The receipts' signing key, read while the deletes run.
  const signing = options.receipts ? receiptSigner(em.fork(), deps.config.deletion.receiptPrivateKey) : null;
  signing?.catch(() => undefined); // awaited below; a failure surfaces there
  // Deletes what `requests` (the batch, or one of its requests) cover, verifies that nothing survived,
  // and marks them completed with their receipts: all of them, or none (it throws).
  const deleteAndComplete = async (requests: string[]) => {
    // The job's own store (events or recordings), deleted here: the statement that counts what survived.
    let own: { store: string; statement: string; count: () => Promise<number> };
    // The held stores' counts after (event deletions), beside the job's own.
    let held: { store: string; statement: string; count: () => Promise<number> }[] = [];
    if (row.deletionType === 'person_events') {
      const groups = await eventDeletionGroups(em, requests);
      // The batch's count is on the lead request's row (rows_deleted), added in each delete's own
      // transaction where the engine has one; each request's own count (its receipt's events before)
      // comes from the same windows, by person and distinct id.
      const counters = new Map([...groups].map(([group, targets]) => [group, eventCounter(targets)]));
      await deps.events.deletePersonEvents(row.projectId, [...groups.keys()], {
        record: (n, tx) => addRowsDeleted(tx ?? em, id, n),
        recordKeys: options.receipts ? (counts, tx, group) => counters.get(group)!(tx, counts) : undefined,
        done: async ({ deleted: n, fromMs, toMs }) => {
          if (n > 0) {
            deletedSpan.from = Math.min(deletedSpan.from, fromMs);
            deletedSpan.to = Math.max(deletedSpan.to, toMs);
          }
          await chunkDone(n);
        },
      });
      // Then what other features hold of the same distinct ids, each delete with its count found before.
      for (const held of deps.heldEventStores ?? [])
        await em.transactional(async (tx) => {
          const found = new Map<string, number>();
          for (const [group, targets] of groups) {
            const gone = await held.delete(tx, row.projectId, group.distinctIds, group.cutoff);
            for (const t of targets)
              found.set(
                t.id,
                (t.distinctIds ?? []).reduce((n, d) => n + (gone.get(d) ?? 0), found.get(t.id) ?? 0),
              );
          }
          if (options.receipts) await addFoundBefore(tx, held.name, found);
        });
      own = {
        store: 'events',
        statement: deps.events.survivorsStatement,
        count: () => deps.events.countPersonEvents(row.projectId, [...groups.keys()], 1000),
      };
      held = (deps.heldEventStores ?? []).map((h) => ({
        store: h.name,
        statement: h.statement,
        count: () => h.count(em.fork(), row.projectId, [...groups.keys()]),
      }));
    } else {
      const target = targetOf(row);
      await recordRecordingsBefore(em, id, { sql: RECORDING_MATCH, params: recordingMatchParams(target) });
      for (let n = -1; n !== 0; ) {
        n = await deleteRecordingsChunk(em, target, id);
        await chunkDone(n);
      }
      own = {
        store: 'recordings',
        statement: RECORDING_SURVIVORS_STATEMENT,
        count: () => countRecordingSurvivors(em, target),
      };
    }
    // Every count after, once every delete committed: the job's own store's, and beside it (a connection
    // of its own) the receipts' other stores'. Only then are the receipts built and signed, their
    // verified_at taken after all of them.
    const [survivors, stores, ...heldAfter] = await Promise.all([
      own.count(),
      signing ? receiptStoresAfter(em.fork(), requests) : null,
      ...held.map((h) => h.count()),
    ]);
    const heldLeft = heldAfter.reduce<number>((n, m) => n + m, 0);
    if (survivors > 0 || heldLeft > 0) {
      const what = row.deletionType === 'person_events' ? 'event(s) survived' : 'recording(s) survived';
      const whose = requests.length === 1 ? `deletion request ${requests[0]}` : `the batch of deletion request ${id}`;
      const left = [
        survivors > 0 ? `${survivors} ${what}` : '',
        heldLeft > 0 ? `${heldLeft} held event(s) survived` : '',
      ];
      throw new Error(`${whose}: ${left.filter(Boolean).join(', ')}; retrying`);
    }
    // The receipts, built once every count is in, with a verified_at taken after them all.
    let receipts: { signer: ReceiptSigner; verifiedAt: string; built: UnsignedReceipt[] } | null = null;
    if (signing && stores) {
      const signer = await signing;
      const verifiedAt = await receiptVerifiedAt(em);
      const verified = {
        [own.store]: { after: survivors, statement: own.statement },
        ...Object.fromEntries(held.map((h, i) => [h.store, { after: heldAfter[i], statement: h.statement }])),
      };
      receipts = { signer, verifiedAt, built: deletionReceipts(stores, verified, verifiedAt, signer) };
    }
    const completed = await em.transactional(async (tx) => {
      // Signed on the thread pool while this transaction marks the requests completed at their verified_at.
      const [signed, deliveries] = await Promise.all([
        receipts ? signDeletionReceipts(receipts.built, receipts.signer) : [],
        completeDeletions(tx, requests, receipts?.verifiedAt).then(() =>
          queueDeletionEvents(tx, row.projectId, 'completed', requests),
        ),
      ]);
      await insertDeletionReceipts(tx, signed);
      return deliveries;
    });
    await enqueueWebhookDeliveries(deps.queues.webhooks, completed);
  };
  try {
    // The requests that could not be completed, with their own error.
    const failed = new Map<string, Error>();
    try {
      await deleteAndComplete(batch);
    } catch (error) {
      if (batch.length === 1) throw error;
      // One request that cannot be deleted (a trigger, a constraint, a lock) fails a batch's statements
      // for all of them: each request on its own, so the others complete in this run and only it fails.
      deps.logger.warn(
        { deletionId: id, requests: batch.length, err: (error as Error).message },
        'deletion batch failed; retrying its requests one by one',
      );
      for (const request of batch) await deleteAndComplete([request]).catch((e: Error) => failed.set(request, e));
    }
    // A companion that failed goes back to its own job, this attempt uncounted: its attempts are its own
    // job's, and it fails with its own error. The lead's own failure is this job's, retried by BullMQ.
    const handedBack = [...failed.keys()].filter((r) => r !== id);
    if (handedBack.length) {
      await handBackCompanions(em, id, handedBack);
      await requeueDeletions(deps.queues.deletions, handedBack, (ids) => dueDeletionIds(em, ids));
      deps.logger.warn({ deletionId: id, handedBack }, 'deletion requests handed back to their own jobs');
    }
    const done = batch.length - failed.size;
    // The companions' own jobs, still queued, have nothing left to do: removed rather than each run.
    await removeDeletionJobs(
      deps.queues.deletions,
      batch.filter((r) => r !== id && !failed.has(r)),
    );
    deps.logger.info({ deletionId: id, requests: done, deleted, ms: Date.now() - started }, 'deletion completed');
    // Past the threshold the dead rows would slow every plan over these tables until a vacuum.
    if (deleted > deps.config.maintenance.vacuumDeadRows)
      await enqueueVacuums(
        deps,
        row.deletionType === 'person_events'
          ? eventPartitionsBetween(em, deletedSpan.from, deletedSpan.to)
          : ['session_recording', 'session_recording_snapshot'],
      );
    const own = failed.get(id);
    if (own) throw own;
    return { deleted, requests: done };
  } catch (error) {
    await dropLeases(em, batch).catch(() => undefined);
    throw error;
  }
}

/** The job's last quick retry failed: the request says so and is tried again later (never final). */
export async function deletionJobFailed(job: Job<JobData['deletion']>, error: Error, deps: JobDeps): Promise<void> {
  const id = job.data?.deletionId;
  if (typeof id !== 'string') return;
  const failed = await deps.orm.em.fork().transactional(async (tx) => {
    if (!(await markDeletionFailed(tx, id, error.message, deps.config.deletion))) return [];
    const [request] = await deletionRequestsByIds(tx, [id]);
    return queueDeletionEvents(tx, request.project_id, 'failed', [id]);
  });
  await enqueueWebhookDeliveries(deps.queues.webhooks, failed);
}

/**
 * Requests of a batch made at the same moment (one bulk_delete) share a cutoff and are deleted
 * together: each group with its requests.
 */
async function eventDeletionGroups(
  em: EntityManager,
  batch: string[],
): Promise<Map<EventDeletionGroup, EventCountTarget[]>> {
  const rows = await eventDeletionTargets(em, batch);
  const byCutoff = new Map<string, { group: EventDeletionGroup; requests: EventCountTarget[] }>();
  for (const r of rows) {
    let found = byCutoff.get(r.cutoff);
    if (!found) {
      found = { group: { cutoff: r.cutoff, personIds: [], distinctIds: [] }, requests: [] };
      byCutoff.set(r.cutoff, found);
    }
    found.group.personIds.push(r.key);
    found.group.distinctIds.push(...(r.distinctIds ?? []));
    found.requests.push({ id: r.id, key: r.key, distinctIds: r.distinctIds ?? null });
  }
  return new Map([...byCutoff.values()].map((f) => [f.group, f.requests]));
}

interface RecordingTarget {
  projectId: number;
  personUuid: string;
  /** A PostgreSQL array literal (pgArray). */
  distinctIds: string;
  cutoff: string;
}

function targetOf(row: AsyncDeletionRow): RecordingTarget {
  return {
    projectId: row.projectId,
    personUuid: row.key,
    distinctIds: pgArray(row.distinctIds ?? []),
    cutoff: row.cutoff,
  };
}

const RECORDING_MATCH = `project_id = ? and (person_id = ?::uuid or distinct_id = any(?::text[])) and created_at <= ?::timestamptz`;
const recordingMatchParams = (t: RecordingTarget) => [t.projectId, t.personUuid, t.distinctIds, t.cutoff];

/**
 * A chunk of the project's sessions that `where` picks (rows locked, others' skipped), deleted with their
 * snapshots, snapshots first, in the caller's transaction: what a deletion and a recording scrub both do.
 */
export async function deleteSessionChunk(
  tx: EntityManager,
  projectId: number,
  where: (eb: ExpressionBuilder<DB, 'session_recording'>) => Expression<SqlBool>,
): Promise<{ sessions: number; snapshots: number }> {
  const sessions = await db(tx)
    .selectFrom('session_recording')
    .select('session_id')
    .where('project_id', '=', projectId)
    .where(where)
    .orderBy('id')
    .limit(Math.max(1, Math.floor(DELETE_CHUNK / 50)))
    .forUpdate()
    .skipLocked()
    .execute();
  if (sessions.length === 0) return { sessions: 0, snapshots: 0 };
  const deleted = await deleteRecordingSessions(
    tx,
    projectId,
    sessions.map((s) => s.session_id),
  );
  return { sessions: sessions.length, snapshots: deleted.snapshots };
}

/** Recordings: a chunk of sessions, snapshots first, progress in the same transaction. */
async function deleteRecordingsChunk(em: EntityManager, t: RecordingTarget, deletionId: string): Promise<number> {
  return em.transactional(async (tx) => {
    // The match is the receipt's verification statement's (RECORDING_MATCH), said as a typed query.
    const deleted = await deleteSessionChunk(tx, t.projectId, (eb) =>
      eb.and([
        eb.or([
          eb('person_id', '=', sql<string>`${t.personUuid}::uuid`),
          eb('distinct_id', '=', sql<string>`any(${t.distinctIds}::text[])`),
        ]),
        eb('created_at', '<=', sql<Date>`${t.cutoff}::timestamptz`),
      ]),
    );
    const n = deleted.sessions + deleted.snapshots;
    if (n > 0) await addRowsDeleted(tx, deletionId, n);
    return n;
  });
}

const RECORDING_SURVIVORS = `select count(*)::int as n from session_recording where ${RECORDING_MATCH}`;
const RECORDING_SURVIVORS_STATEMENT = namedStatement(RECORDING_SURVIVORS, [
  'project_id',
  'person_uuid',
  'distinct_ids',
  'cutoff',
]);

async function countRecordingSurvivors(em: EntityManager, t: RecordingTarget): Promise<number> {
  const [row] = await rows<{ n: number }>(em, RECORDING_SURVIVORS, recordingMatchParams(t));
  return row.n;
}
