// One deletion request (an async_deletion row): a person's events or recordings. Idempotent: the
// row is claimed with a lease, deletes are bounded by the request's cutoff (only data that existed
// when it was asked for), run in short chunks, and the row completes only when nothing survives.
import type { Job } from 'bullmq';
import { UnrecoverableError } from 'bullmq';
import type { EntityManager } from '@mikro-orm/postgresql';
import type { DeletionJobData } from '../../shared/queues.ts';
import type { WorkerDeps } from '../deps.ts';

/** Rows per delete statement: short locks, the API stays responsive. */
export const DELETE_CHUNK = Number(process.env.DELETION_CHUNK_SIZE ?? 5000);
/** How long a claim holds without renewal (renewed after every chunk). */
const LEASE_SECONDS = Number(process.env.DELETION_LEASE_SECONDS ?? 30);

export class DeletionBusyError extends Error {}

interface ClaimedRow {
  id: string;
  project_id: number;
  deletion_type: 'person_events' | 'person_recordings';
  key: string;
  distinct_ids: string[] | null;
  cutoff: Date;
}

export async function deletePersonData(job: Job<DeletionJobData>, deps: WorkerDeps): Promise<{ deleted: number; skipped?: string }> {
  const id = job.data?.deletionId;
  if (typeof id !== 'string' || !/^\d+$/.test(id)) throw new UnrecoverableError(`invalid deletion id ${JSON.stringify(id)}`);
  const em = deps.orm.em.fork() as EntityManager;
  const conn = em.getConnection();
  const [row] = await conn.execute<ClaimedRow[]>(
    `update async_deletion set status = 'running', started_at = coalesce(started_at, now()), attempts = attempts + 1,
            lease_until = now() + make_interval(secs => ?)
      where id = ? and delete_verified_at is null and (status in ('pending', 'failed') or (status = 'running' and lease_until < now()))
      returning id::text, project_id, deletion_type, key, distinct_ids, cutoff`,
    [LEASE_SECONDS, id],
  );
  if (!row) {
    const [current] = await conn.execute<any[]>(`select status, lease_until from async_deletion where id = ?`, [id]);
    if (!current) throw new UnrecoverableError(`deletion request ${id} does not exist`);
    if (current.status === 'completed') return { deleted: 0, skipped: 'already completed' };
    // Another worker holds a live lease: retry later (with backoff) rather than delete twice.
    throw new DeletionBusyError(`deletion request ${id} is being processed by another worker`);
  }
  deps.logger.info({ deletionId: id, type: row.deletion_type, projectId: row.project_id, jobId: job.id }, 'deletion started');
  const started = Date.now();
  const target = targetOf(row);
  let deleted = 0;
  for (;;) {
    const n = await deleteChunk(em, target, id);
    deleted += n;
    await job.updateProgress({ deleted });
    if (n < DELETE_CHUNK) break;
  }
  const survivors = await countSurvivors(em, target);
  if (survivors > 0) throw new Error(`deletion request ${id}: ${survivors} rows survived; retrying`);
  await conn.execute(
    `update async_deletion set status = 'completed', delete_verified_at = now(), finished_at = now(), lease_until = null, last_error = null where id = ?`,
    [id],
  );
  deps.logger.info({ deletionId: id, deleted, ms: Date.now() - started }, 'deletion completed');
  return { deleted };
}

interface Target {
  type: ClaimedRow['deletion_type'];
  projectId: number;
  personUuid: string;
  distinctIds: string;
  cutoff: Date;
}

function targetOf(row: ClaimedRow): Target {
  return { type: row.deletion_type, projectId: row.project_id, personUuid: row.key, distinctIds: JSON.stringify(row.distinct_ids ?? []), cutoff: row.cutoff };
}

// A person's data: rows recorded under its uuid, or under one of the distinct ids it had when the
// request was made — and only what existed then.
// Two branches, each able to use its own index ((project_id, person_id, timestamp) and
// (project_id, distinct_id, timestamp)); an OR of the two would scan the whole table.
const EVENT_MATCH_ROWS = `select uuid, timestamp from event where project_id = ? and person_id = ?::uuid and timestamp <= ? and created_at <= ?
  union
  select uuid, timestamp from event where project_id = ? and distinct_id in (select jsonb_array_elements_text(?::jsonb)) and timestamp <= ? and created_at <= ?`;
const eventMatchParams = (t: Target) => [t.projectId, t.personUuid, t.cutoff, t.cutoff, t.projectId, t.distinctIds, t.cutoff, t.cutoff];
const RECORDING_MATCH = `project_id = ? and (person_id = ?::uuid or distinct_id in (select jsonb_array_elements_text(?::jsonb))) and created_at <= ?`;

/**
 * Deletes one chunk and, in the same statement, adds it to the request's progress and renews the
 * lease: a worker killed at any point leaves the count exactly matching what is gone.
 */
async function deleteChunk(em: EntityManager, t: Target, deletionId: string): Promise<number> {
  const conn = em.getConnection();
  if (t.type === 'person_events') {
    const [row] = await conn.execute<any[]>(
      `with gone as (
         delete from event e using (select * from (${EVENT_MATCH_ROWS}) m limit ?) s
          where e.project_id = ? and e.uuid = s.uuid and e.timestamp = s.timestamp returning 1)
       update async_deletion set rows_deleted = rows_deleted + (select count(*) from gone), lease_until = now() + make_interval(secs => ?)
        where id = ? returning (select count(*) from gone)::int as n`,
      [...eventMatchParams(t), DELETE_CHUNK, t.projectId, LEASE_SECONDS, deletionId],
    );
    return row.n;
  }
  // Recordings: a chunk of sessions, snapshots first.
  return em.transactional(async (tx) => {
    const c = tx.getConnection();
    const ctx = tx.getTransactionContext();
    const sessions = await c.execute<{ session_id: string }[]>(
      `select session_id from session_recording where ${RECORDING_MATCH} order by id limit ? for update skip locked`,
      [t.projectId, t.personUuid, t.distinctIds, t.cutoff, Math.max(1, Math.floor(DELETE_CHUNK / 50))],
      'all',
      ctx,
    );
    if (sessions.length === 0) return 0;
    const ids = JSON.stringify(sessions.map((s) => s.session_id));
    const snapshots = await c.execute<any[]>(
      `delete from session_recording_snapshot where project_id = ? and session_id in (select jsonb_array_elements_text(?::jsonb)) returning 1`,
      [t.projectId, ids],
      'all',
      ctx,
    );
    await c.execute(`delete from session_recording where project_id = ? and session_id in (select jsonb_array_elements_text(?::jsonb))`, [t.projectId, ids], 'run', ctx);
    const n = sessions.length + snapshots.length;
    await c.execute(`update async_deletion set rows_deleted = rows_deleted + ?, lease_until = now() + make_interval(secs => ?) where id = ?`, [n, LEASE_SECONDS, deletionId], 'run', ctx);
    return n;
  });
}

async function countSurvivors(em: EntityManager, t: Target): Promise<number> {
  const sql =
    t.type === 'person_events'
      ? { q: `select count(*)::int as n from (${EVENT_MATCH_ROWS}) m`, p: eventMatchParams(t) }
      : { q: `select count(*)::int as n from session_recording where ${RECORDING_MATCH}`, p: [t.projectId, t.personUuid, t.distinctIds, t.cutoff] };
  const [row] = await em.getConnection().execute<any[]>(sql.q, sql.p);
  return row.n;
}

/** After the last attempt: the row says failed, with the reason, and stays queryable. */
export async function markDeletionFailed(deps: WorkerDeps, deletionId: string, reason: string): Promise<void> {
  await deps.orm.em
    .fork()
    .getConnection()
    .execute(`update async_deletion set status = 'failed', last_error = ?, lease_until = null where id = ? and delete_verified_at is null`, [reason.slice(0, 2000), deletionId]);
}
