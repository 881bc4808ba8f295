// VACUUM (ANALYZE) of the tables the service deletes from. Deleted rows stay in the heap and the
// indexes until a vacuum; where autovacuum is off (or waits for a fifth of a large table) they stay
// for good, and the planner walks the dead index entries of every lookup it plans: after 10,000
// persons were deleted, planning a person lookup took 440–715 ms and /flags fell to 28 req/s. So a
// deletion job that removed many rows queues a vacuum of the tables it deleted from, and the periodic
// statistics job vacuums whatever table has dead rows past the threshold, whatever autovacuum does.
import { UnrecoverableError, type Job } from 'bullmq';
import type { EntityManager } from '@mikro-orm/postgresql';
import { enqueue, type JobData } from '../jobs.ts';
import { pgArray, quoteIdent, rows } from './sql.ts';
import type { Queues } from '../queues.ts';
import { withTimeout } from '../timeout.ts';
import type { Deps } from '../deps.ts';

/** The tables the maintenance jobs look after, besides every partition of `event`. */
export const MAINTAINED_TABLES = [
  'person',
  'person_distinct_id',
  'cohort_person',
  'event_definition',
  'session_recording',
  'session_recording_snapshot',
  'async_deletion',
  // Every computation of an experiment's results from the start rewrites its per-person state.
  'experiment_person_state',
];

/** `s` (pg_stat_user_tables) is a maintained table. */
const MAINTAINED = `s.schemaname = current_schema() and (s.relname = any(?::text[])
  or exists (select 1 from pg_inherits i where i.inhrelid = s.relid and i.inhparent = 'event'::regclass))`;

/**
 * A backend reports its deleted rows to pg_stat_user_tables up to 10 s after its transaction
 * (PostgreSQL's idle statistics interval). A vacuum before then would be followed by the deletes'
 * dead-row count, and the statistics job would vacuum the table again for nothing; waiting also
 * lets the deletion jobs of one window (several projects) share one vacuum per table.
 */
export const VACUUM_DELAY_MS = 15_000;

/**
 * Queues a vacuum of each table, at most one waiting per table (a table's job already waiting takes
 * this request; one running gets one successor). Returns the tables queued. Never throws: with
 * Redis or the catalog query failing, the statistics job still finds the dead rows.
 */
export async function enqueueVacuums(
  deps: Pick<Deps, 'queues' | 'logger' | 'config'>,
  which: string[] | Promise<string[]>,
): Promise<string[]> {
  let tables: string[] = [];
  try {
    tables = await which;
    await withTimeout(
      Promise.all(tables.map((table) => enqueueVacuum(deps.queues, table))),
      deps.config.enqueueTimeoutMs,
      'Redis',
    );
    return tables;
  } catch (error) {
    deps.logger.warn({ err: (error as Error).message, tables }, 'vacuum not queued; the statistics job will find it');
    return [];
  }
}

const enqueueVacuum = (queues: Queues, table: string) =>
  enqueue(
    queues,
    'vacuumTable',
    { table },
    { delay: VACUUM_DELAY_MS, deduplication: { id: `vacuum-${table}`, keepLastIfActive: true } },
  );

/** The event partitions for event time [fromMs, toMs): the months it spans, and the default one beyond them. */
export async function eventPartitionsBetween(em: EntityManager, fromMs: number, toMs: number): Promise<string[]> {
  const found = await rows<{ name: string }>(
    em,
    `with part as (
       select c.relname, substring(b from $$FROM \\('([^']+)'\\)$$)::timestamptz as lo,
              substring(b from $$TO \\('([^']+)'\\)$$)::timestamptz as hi
         from pg_inherits i join pg_class c on c.oid = i.inhrelid
        cross join lateral pg_get_expr(c.relpartbound, c.oid) b
        where i.inhparent = 'event'::regclass),
     span as (select to_timestamp(?::float8 / 1000) as lo, to_timestamp(?::float8 / 1000) as hi),
     months as (select min(lo) as lo, max(hi) as hi from part)
     select p.relname as name from part p, span s, months m
      where (p.lo is not null and p.lo < s.hi and p.hi > s.lo)
         or (p.lo is null and (m.lo is null or s.lo < m.lo or s.hi > m.hi))
      order by 1`,
    [fromMs, toMs],
  );
  return found.map((r) => r.name);
}

interface TableStats {
  relname: string;
  dead: number;
  vacuums: number;
}

const statsOf = (em: EntityManager, condition: string, params: unknown[]) =>
  rows<TableStats>(
    em,
    `select s.relname, s.n_dead_tup::float8 as dead, (s.vacuum_count + s.autovacuum_count)::float8 as vacuums
       from pg_stat_user_tables s where ${MAINTAINED} and ${condition} order by s.relname`,
    [pgArray(MAINTAINED_TABLES), ...params],
  );

/**
 * VACUUM (ANALYZE) of each table, on a pooled connection outside any transaction (VACUUM refuses
 * one; through PgBouncer in transaction mode a lone statement is fine). SKIP_LOCKED: a table another
 * vacuum or ANALYZE holds is left to it (or to the next run) instead of tying up the worker.
 * Returns the tables vacuumed and those skipped.
 */
async function vacuum(
  em: EntityManager,
  tables: TableStats[],
): Promise<{ vacuumed: string[]; skipped: string[]; deadBefore: number }> {
  const vacuumed: string[] = [];
  const skipped: string[] = [];
  for (const t of tables) {
    await rows(em.fork(), `vacuum (analyze, skip_locked) ${quoteIdent(t.relname)}`);
    const [after] = await statsOf(em.fork(), 's.relname = ?', [t.relname]);
    (after && after.vacuums > t.vacuums ? vacuumed : skipped).push(t.relname);
  }
  return { vacuumed, skipped, deadBefore: tables.reduce((sum, t) => sum + Number(t.dead), 0) };
}

/** The vacuum-table job: one maintained table, queued by a deletion job. */
export async function vacuumTable(
  job: Job<JobData['vacuumTable']>,
  deps: Deps,
): Promise<{ vacuumed: string[]; skipped: string[] }> {
  const table = job.data?.table;
  const em = deps.orm.em.fork();
  const [target] = typeof table === 'string' ? await statsOf(em, 's.relname = ?', [table]) : [];
  if (!target) throw new UnrecoverableError(`not a table the maintenance vacuums: ${JSON.stringify(table)}`);
  const started = Date.now();
  const { vacuumed, skipped, deadBefore } = await vacuum(em, [target]);
  deps.logger.info({ vacuumed, skipped, deadBefore, ms: Date.now() - started }, 'vacuum done');
  return { vacuumed, skipped };
}

/**
 * Vacuums every maintained table with at least `minDeadRows` dead rows, or, on a table too small to
 * reach that, with a fifth of its live rows dead (autovacuum's default share) and at least a tenth
 * of `minDeadRows`; the statistics job runs this.
 */
export async function vacuumDueTables(
  em: EntityManager,
  minDeadRows: number,
): Promise<{ vacuumed: string[]; skipped: string[]; deadBefore: number }> {
  const due = await statsOf(em, 's.n_dead_tup > 0 and s.n_dead_tup >= least(?, greatest(? / 10, 0.2 * s.n_live_tup))', [
    minDeadRows,
    minDeadRows,
  ]);
  return vacuum(em, due);
}
