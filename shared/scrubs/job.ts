// One scrub (an event_scrub row), run by the worker: claimed with a lease (scrub.running), the matching events deleted or stripped through the
// event store (PostgreSQL in windows of event time, ClickHouse in one statement), or the recordings
// deleted, each statement counting its rows; counted again after, and completed only when nothing that
// matches survives (so what was there before is what the statements changed), with a receipt
// signed by the deletion receipts' key (scrub.completed). A survivor (a copy shipped to ClickHouse while
// it ran) fails the attempt, and the retry takes it. Only events received up to the scrub's cutoff (the
// moment it was asked for) are touched.
import type { EntityManager } from '@mikro-orm/postgresql';
import type { Job } from 'bullmq';
import { UnrecoverableError } from 'bullmq';
import { createHash } from 'node:crypto';
import type { JobData } from '../platform/jobs.ts';
import type { Deps } from '../platform/deps.ts';
import { canonicalJson } from '../platform/canonical-json.ts';
import { enqueueWebhookDeliveries, requeueRowJobs } from '../platform/queues.ts';
import { deleteScrubRecordings, receiptSigner, signReceiptBody } from '../deletions/index.ts';
import type { EventStoreDeps } from '../events/index.ts';
import { eventMatchOf, recordingMatchOf, SCRUB_JOB, scrubCounts } from './service.ts';
import {
  addRowsChanged,
  claimScrub,
  completeScrub,
  dropScrubLease,
  dueScrubIds,
  markScrubFailed,
  recordCountsBefore,
  renewScrubLease,
  scrubCountsBefore,
  scrubProjectId,
  scrubRowsChanged,
} from './store.ts';
import { queueScrubEvents } from './webhooks.ts';

type JobDeps = Deps & EventStoreDeps;

export async function runScrub(
  job: Job<JobData['scrub']>,
  deps: JobDeps,
): Promise<{ changed: Record<string, number> } | { skipped: string }> {
  const id = job.data?.scrubId;
  if (typeof id !== 'string' || !/^\d+$/.test(id))
    throw new UnrecoverableError(`invalid scrub id ${JSON.stringify(id)}`);
  const em = deps.orm.em.fork();
  const { leaseSeconds } = deps.config.deletion;
  const claim = await em.transactional(async (tx) => {
    const claimed = await claimScrub(tx, id, leaseSeconds);
    const deliveries =
      claimed && claimed.previousStatus === 'pending'
        ? await queueScrubEvents(tx, claimed.projectId, 'running', id)
        : [];
    return { claimed, deliveries };
  });
  await enqueueWebhookDeliveries(deps.queues.webhooks, claim.deliveries);
  const scrub = claim.claimed;
  // Done, cancelled, not due yet, or held by a live lease: nothing to do here.
  if (!scrub) return { skipped: 'not claimable (done, cancelled, not due or held)' };
  const signing = receiptSigner(em.fork(), deps.config.deletion.receiptPrivateKey);
  signing.catch(() => undefined); // awaited below; a failure surfaces there
  try {
    const counts = () =>
      scrubCounts(em, deps.events, scrub.projectId, scrub.target, scrub.action, scrub.filter, scrub.cutoff);
    let renewedAt = Date.now();
    // Each statement's rows are added to the row's rows_changed in its own transaction (where the store
    // has one), so the count matches what is gone whatever point a worker dies at.
    const record = (store: string, n: number, tx: EntityManager | null) => addRowsChanged(tx ?? em, id, store, n);
    const done = async (store: string, n: number) => {
      await job.updateProgress?.({ store, changed: n });
      if (Date.now() - renewedAt > (leaseSeconds * 1000) / 3) {
        await renewScrubLease(em, id, leaseSeconds);
        renewedAt = Date.now();
      }
    };
    let changed: Record<string, number>;
    if (scrub.target === 'recordings') {
      // The matching sessions' snapshots go with them: counted before, as they are not counted by the deletes.
      const before = scrub.countsBefore ?? (await counts());
      await recordCountsBefore(em, id, before);
      const n = await deleteScrubRecordings(
        em,
        scrub.projectId,
        recordingMatchOf(scrub.filter, scrub.cutoff),
        (k, tx) => record('recordings', k, tx),
        (k) => done('recordings', k),
      );
      changed = { recordings: n };
    } else {
      const action =
        scrub.action === 'strip_properties'
          ? { kind: 'strip_properties' as const, keys: scrub.filter.keys ?? [] }
          : { kind: 'delete' as const };
      const result = await deps.events.scrubEvents(
        scrub.projectId,
        eventMatchOf(scrub.filter, scrub.cutoff, false),
        action,
        { record, done },
      );
      changed = Object.fromEntries(Object.entries(result).filter(([, n]) => n !== undefined)) as Record<string, number>;
    }
    const after = await counts();
    const survivors = Object.values(after).reduce((s, n) => s + n, 0);
    if (survivors > 0) throw new Error(`scrub ${id}: ${survivors} matching row(s) survived; retrying`);
    // Events: what was there before is what the statements changed, over every attempt (each counts its
    // own rows), since nothing matching is left: no count of its own ahead of the deletes (a second
    // pass over the rows). Recordings: counted before their first delete (the snapshots too).
    const totals = await scrubRowsChanged(em, id);
    const before =
      scrub.target === 'recordings'
        ? ((await scrubCountsBefore(em, id)) ?? {})
        : Object.fromEntries(Object.keys(after).map((store) => [store, totals[store] ?? 0]));
    if (scrub.target !== 'recordings') await recordCountsBefore(em, id, before);
    const signer = await signing;
    const receipt = {
      type: 'scrub_receipt',
      scrub_id: id,
      project_id: scrub.projectId,
      target: scrub.target,
      action: scrub.action,
      // The filter itself may hold personal data (a property value): the receipt cites its hash.
      filter_sha256: createHash('sha256').update(canonicalJson(scrub.filter)).digest('hex'),
      event: scrub.filter.event,
      keys: scrub.filter.keys,
      after: scrub.filter.after,
      before: scrub.filter.before,
      cutoff: scrub.cutoff,
      stores: Object.fromEntries(
        Object.keys({ ...before, ...after }).map((store) => [
          store,
          { before: before[store] ?? 0, after: after[store] ?? 0 },
        ]),
      ),
      verified_at: new Date().toISOString(),
      key_id: signer.keyId,
    };
    const signature = await signReceiptBody(receipt, signer);
    const deliveries = await em.transactional(async (tx) => {
      await completeScrub(tx, id, { countsAfter: after, receipt, signature, keyId: signer.keyId });
      return queueScrubEvents(tx, scrub.projectId, 'completed', id);
    });
    await enqueueWebhookDeliveries(deps.queues.webhooks, deliveries);
    deps.logger.info({ scrubId: id, changed }, 'scrub completed');
    return { changed };
  } catch (error) {
    await dropScrubLease(em, id, (error as Error).message).catch(() => undefined);
    throw error;
  }
}

/** The job's attempts are spent: the scrub says so (scrub.failed); a new scrub can be asked for. */
export async function scrubJobFailed(job: Job<JobData['scrub']>, error: Error, deps: JobDeps): Promise<void> {
  const id = job.data?.scrubId;
  if (typeof id !== 'string' || !/^\d+$/.test(id)) return;
  const deliveries = await deps.orm.em.fork().transactional(async (tx) => {
    if (!(await markScrubFailed(tx, id, error.message))) return [];
    const projectId = await scrubProjectId(tx, id);
    return projectId === undefined ? [] : queueScrubEvents(tx, projectId, 'failed', id);
  });
  await enqueueWebhookDeliveries(deps.queues.webhooks, deliveries);
}

/**
 * Each worker's reconciler pass: every due scrub (mode now made while Redis was down, an off-peak one
 * whose window has opened, a dead worker's) gets a live job.
 */
export async function reconcileScrubs(deps: JobDeps): Promise<{ enqueued: number }> {
  const em = deps.orm.em.fork();
  const due = await dueScrubIds(em);
  const enqueued = await requeueRowJobs(deps.queues.deletions, SCRUB_JOB, due, (ids) => dueScrubIds(em, ids));
  if (enqueued.length) deps.logger.info({ enqueued: enqueued.length }, 'reconciler enqueued scrubs');
  return { enqueued: enqueued.length };
}
