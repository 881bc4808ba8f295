// Deletion requests (async_deletion rows): the API writes them in the same transaction as the
// person change; the worker processes them. Re-requesting a pending deletion is a no-op.
import type { EntityManager } from '@mikro-orm/postgresql';

export type DeletionType = 'person_events' | 'person_recordings';
/** weekly: the Sunday 05:00 UTC batch (DELETE/bulk_delete with delete_events); off_peak: the nightly window (POST delete_events); immediate: as soon as possible (recordings). */
export type DeletionMode = 'weekly' | 'off_peak' | 'immediate';
/** pending → running → completed (delete_verified_at set) | failed (gave up; last_error says why). */
export type DeletionStatus = 'pending' | 'running' | 'completed' | 'failed';

export interface DeletionRequest {
  projectId: number;
  type: DeletionType;
  mode: DeletionMode;
  /** The person's uuid. */
  key: string;
  /** The person's distinct ids when asked (recordings are found by them after the person is gone). */
  distinctIds: string[];
  createdById: number | null;
}

/**
 * Inserts the requests, skipping any already pending for the same (project, type, key).
 * Returns the ids of the rows that now stand for each request (new or already pending).
 */
export async function recordDeletionRequests(em: EntityManager, requests: DeletionRequest[]): Promise<string[]> {
  if (requests.length === 0) return [];
  const conn = em.getConnection();
  const ctx = em.getTransactionContext();
  const payload = JSON.stringify(
    requests.map((r) => ({ project_id: r.projectId, deletion_type: r.type, mode: r.mode, key: r.key, distinct_ids: r.distinctIds, created_by_id: r.createdById })),
  );
  await conn.execute(
    `insert into async_deletion (project_id, deletion_type, mode, key, distinct_ids, created_by_id)
     select r.project_id, r.deletion_type, r.mode, r.key, array(select jsonb_array_elements_text(r.distinct_ids)), r.created_by_id
       from jsonb_to_recordset(?::jsonb) as r(project_id int, deletion_type text, mode text, key text, distinct_ids jsonb, created_by_id int)
     on conflict (project_id, deletion_type, key) where delete_verified_at is null do nothing`,
    [payload],
    'run',
    ctx,
  );
  const rows = await conn.execute<{ id: string }[]>(
    `select a.id from async_deletion a
       join jsonb_to_recordset(?::jsonb) as r(project_id int, deletion_type text, key text)
         on a.project_id = r.project_id and a.deletion_type = r.deletion_type and a.key = r.key
      where a.delete_verified_at is null`,
    [payload],
    'all',
    ctx,
  );
  return rows.map((r) => String(r.id));
}
