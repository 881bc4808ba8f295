// The event table's monthly partitions, statement by statement (the PostgreSQL engine's; retention
// plans with them): which projects a partition holds, deleting a project's old rows in chunks, and
// dropping a partition that holds only projects past their retention line. Raw SQL: partitions have no entity.
import type { EntityManager } from '@mikro-orm/postgresql';
import { quoteIdent, rows, run } from '../platform/db/sql.ts';
import { eventPartitions } from './store.ts';

/**
 * A statement on one partition, by name: a partition another run (or a preview's plan) saw may be
 * dropped meanwhile; then there is nothing of it left to read or delete (`gone`).
 */
async function onPartition<T>(statement: () => Promise<T>, gone: T): Promise<T> {
  try {
    return await statement();
  } catch (error) {
    if ((error as { code?: string }).code === '42P01') return gone; // undefined_table
    throw error;
  }
}

/**
 * The projects with rows in one partition: a skip scan of its (project_id, timestamp) index, one
 * descent per project, however many rows it holds.
 */
export async function projectsInPartition(em: EntityManager, partition: string): Promise<number[]> {
  const t = quoteIdent(partition);
  const found = await onPartition(
    () =>
      rows<{ project_id: number }>(
        em,
        `with recursive p as (
       (select project_id from ${t} order by project_id limit 1)
       union all
       select (select project_id from ${t} where project_id > p.project_id order by project_id limit 1) from p
        where p.project_id is not null)
     select project_id from p where project_id is not null`,
      ),
    [],
  );
  return found.map((r) => r.project_id);
}

/** Events per project in one partition. */
export async function eventsPerProjectIn(em: EntityManager, partition: string): Promise<Map<number, number>> {
  const found = await onPartition(
    () =>
      rows<{ project_id: number; n: number }>(
        em,
        `select project_id, count(*)::float8 as n from ${quoteIdent(partition)} group by project_id`,
      ),
    [],
  );
  return new Map(found.map((r) => [r.project_id, Number(r.n)]));
}

/**
 * Drops a monthly partition, if it still holds rows of `allowed` projects only. The check and the
 * detach are one transaction under the event table's ACCESS EXCLUSIVE lock (which detaching takes
 * anyway; ONLY: not its other partitions), so a row of another project cannot arrive in between, and
 * event statements wait only for that. The detached table is then dropped outside the lock (freeing
 * its files takes longer). `lockTimeoutMs` bounds the wait for the lock: while a DDL waits, every
 * statement on the event table queues behind it.
 * 'dropped'; 'kept': it holds another project's rows now (or is gone already); 'busy': no lock in time.
 */
export async function dropPartitionIfOnly(
  em: EntityManager,
  partition: string,
  allowed: number[],
  lockTimeoutMs: number,
  timings: { lockedMs?: number; dropMs?: number } = {},
): Promise<'dropped' | 'kept' | 'busy'> {
  const t = quoteIdent(partition);
  let outcome: 'dropped' | 'kept' | 'busy';
  const t0 = performance.now();
  try {
    outcome = await em.transactional(async (tx) => {
      await run(tx, `set local lock_timeout = ${Math.max(1, Math.floor(lockTimeoutMs))}`);
      await run(tx, `lock table only event in access exclusive mode`);
      // Another run may have detached it since it was planned.
      const [attached] = await rows(
        tx,
        `select 1 from pg_inherits where inhrelid = to_regclass(?) and inhparent = 'event'::regclass`,
        [partition],
      );
      if (!attached) return 'kept';
      const present = await projectsInPartition(tx, partition);
      if (present.length === 0 || present.some((id) => !allowed.includes(id))) return 'kept';
      await run(tx, `alter table event detach partition ${t}`);
      return 'dropped';
    });
  } catch (error) {
    if ((error as { code?: string }).code === '55P03') return 'busy'; // lock_not_available
    throw error;
  }
  timings.lockedMs = performance.now() - t0;
  if (outcome === 'dropped') {
    const t1 = performance.now();
    await run(em, `drop table if exists ${t}`);
    timings.dropMs = performance.now() - t1;
  }
  return outcome;
}

/**
 * Deletes up to `chunk` of a project's events older than `cutoff` from one partition (by ctid, so
 * the statement is bounded whatever the table's size); returns how many.
 */
export async function deleteEventsChunk(
  em: EntityManager,
  partition: string,
  projectId: number,
  cutoff: Date,
  chunk: number,
): Promise<number> {
  const t = quoteIdent(partition);
  return onPartition(
    () =>
      run(
        em,
        `delete from ${t} where ctid = any(array(select ctid from ${t} where project_id = ? and timestamp < ? limit ?))`,
        [projectId, cutoff, chunk],
      ),
    0,
  );
}

/**
 * Deletes a project's events older than `cutoff`, partition by partition (those that may hold some),
 * in statements of at most `chunk` rows, each reported with its partition; returns how many.
 */
export async function deleteProjectEventsBefore(
  em: EntityManager,
  projectId: number,
  cutoff: Date,
  chunk: number,
  onDeleted?: (n: number, partition: string) => Promise<void> | void,
): Promise<number> {
  const { months, others } = await eventPartitions(em);
  let deleted = 0;
  for (const partition of [...months.filter((m) => m.from < cutoff).map((m) => m.name), ...others])
    for (let n = chunk; n >= chunk; ) {
      n = await deleteEventsChunk(em, partition, projectId, cutoff, chunk);
      deleted += n;
      await onDeleted?.(n, partition);
    }
  return deleted;
}

/** One project's events in one partition. */
export async function countProjectEventsIn(em: EntityManager, partition: string, projectId: number): Promise<number> {
  const [row] = await onPartition(
    () =>
      rows<{ n: number }>(em, `select count(*)::float8 as n from ${quoteIdent(partition)} where project_id = ?`, [
        projectId,
      ]),
    [{ n: 0 }],
  );
  return Number(row.n);
}
