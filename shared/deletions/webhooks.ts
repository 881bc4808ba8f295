// The webhook events of deletion requests: deletion.queued, .running, .completed, .failed and .cancelled,
// one per request and transition, queued in the transaction of the transition (shared/webhooks/).
import type { EntityManager } from '@mikro-orm/postgresql';
import { sql } from 'kysely';
import { db } from '../platform/db/kysely.ts';
import { queueWebhookEvents } from '../webhooks/index.ts';
import { deletionRequestsByIds } from './store.ts';

export type DeletionTransition = 'queued' | 'running' | 'completed' | 'failed' | 'cancelled';

/** The status a request has after each transition. */
const STATUS_AFTER: Record<DeletionTransition, string> = {
  queued: 'pending',
  running: 'running',
  completed: 'completed',
  failed: 'failed',
  cancelled: 'cancelled',
};

/**
 * Queues `deletion.<transition>` for those of `ids` (requests of one project) that the caller's
 * transaction has just moved there: their status is the one after the transition, and for `queued` the
 * row was made by this transaction (its created_at is the transaction's now(); a repeated request that
 * joined a pending one is no new transition). An event's data is the request as the deletion_status
 * endpoint shows it; a completed one adds its receipt: when it was verified, and the batch it was
 * deleted in (event deletions of a project go together; the lead request counts the batch's rows).
 * Returns the delivery ids, to hand to the queue after the commit.
 *
 * The hook of cancellation: a cancel calls this with 'cancelled' in its transaction.
 */
export async function queueDeletionEvents(
  em: EntityManager,
  projectId: number,
  transition: DeletionTransition,
  ids: string[],
): Promise<string[]> {
  if (ids.length === 0) return [];
  return queueWebhookEvents(em, projectId, `deletion.${transition}`, async () => {
    let query = db(em)
      .selectFrom('async_deletion as a')
      .leftJoin('async_deletion as lead', 'lead.id', 'a.claimed_by')
      .select((eb) => [
        eb.cast<string>('a.id', 'text').as('id'),
        eb.cast<string | null>('a.claimed_by', 'text').as('batch_lead_id'),
        eb.cast<string | null>('lead.rows_deleted', 'text').as('batch_rows_deleted'),
      ])
      .where((eb) => eb('a.id', '=', eb.fn.any(eb.val(ids))))
      .where('a.project_id', '=', projectId)
      .where('a.status', '=', STATUS_AFTER[transition]);
    if (transition === 'queued') query = query.where('a.created_at', '=', sql<Date>`now()`);
    const moved = await query.execute();
    const views = await deletionRequestsByIds(
      em,
      moved.map((r) => r.id),
    );
    const batchOf = new Map(moved.map((r) => [r.id, r]));
    return views.map((deletion) => {
      if (transition !== 'completed') return { deletion };
      const batch = batchOf.get(deletion.id)!;
      return {
        deletion,
        receipt: {
          verified_at: deletion.delete_verified_at,
          batch_lead_id: batch.batch_lead_id ?? deletion.id,
          batch_requests: ids.length,
          batch_rows_deleted: Number(batch.batch_rows_deleted ?? 0),
        },
      };
    });
  });
}
