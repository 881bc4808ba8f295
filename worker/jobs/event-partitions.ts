// Keeps a monthly partition of the event table ready ahead of the events that need it (the
// function is migration 0019's ensure_event_partitions): deleting or scanning a month then touches
// that month's table and indexes, not one table of every event ever sent.
import { UnrecoverableError, type Job } from 'bullmq';
import type { EntityManager } from '@mikro-orm/postgresql';
import type { WorkerDeps } from '../deps.ts';

export async function ensureEventPartitions(
  job: Job<{ monthsAhead?: number }> | null,
  deps: WorkerDeps,
): Promise<{ created: string[] }> {
  const monthsAhead = job?.data?.monthsAhead ?? deps.config.maintenance.eventPartitionsAhead;
  if (!Number.isInteger(monthsAhead) || monthsAhead < 0 || monthsAhead > 120)
    throw new UnrecoverableError(`invalid monthsAhead ${JSON.stringify(monthsAhead)}`);
  const rows = await deps.orm.em
    .fork()
    .getConnection()
    .execute<{ name: string }[]>(`select ensure_event_partitions(?) as name`, [monthsAhead]);
  const created = rows.map((r) => r.name);
  if (created.length > 0) deps.logger.info({ created }, 'event partitions created');
  return { created };
}

/** Where the event table's first monthly partition begins, read from the catalog (null: none yet). */
export async function firstMonthlyPartitionStart(
  conn: ReturnType<EntityManager['getConnection']>,
): Promise<string | null> {
  const [{ start }] = await conn.execute<{ start: string | null }[]>(
    `select min(substring(pg_get_expr(c.relpartbound, c.oid) from $$FROM \\('([^']+)'\\)$$)::timestamptz)::text as start
       from pg_inherits i join pg_class c on c.oid = i.inhrelid where i.inhparent = 'event'::regclass`,
  );
  return start;
}
