// PostgreSQL plans person and event lookups from table statistics. Autovacuum refreshes them only
// after a tenth of a table has changed (and not at all where it is off), so on a large table a new
// project can grow to millions of rows while the planner still believes it is empty — and then
// fetches a person by id through an index of the whole project (44 ms instead of 0.1 ms, measured).
// Every few minutes this job ANALYZEs the tables, and event partitions, that changed by a fixed
// number of rows since their last ANALYZE (sampling, so cheap whatever the table's size), and
// VACUUMs (with ANALYZE) those with many dead rows (vacuum-tables.ts: why).
import { UnrecoverableError, type Job } from 'bullmq';
import { pgArray, quoteIdent, rows } from './sql.ts';
import type { JobData } from '../jobs.ts';
import type { Deps } from '../deps.ts';
import { MAINTAINED_TABLES, vacuumDueTables } from './vacuum-job.ts';

const threshold = (name: string, value: unknown) => {
  if (typeof value !== 'number' || !(value >= 0))
    throw new UnrecoverableError(`invalid ${name} ${JSON.stringify(value)}`);
  return value;
};

export async function refreshStatistics(
  job: Job<JobData['refreshStatistics']> | null,
  deps: Deps,
): Promise<{ analyzed: string[]; vacuumed: string[] }> {
  const { statisticsRefreshRows, vacuumDeadRows } = deps.config.maintenance;
  const minChangedRows = threshold('minChangedRows', job?.data?.minChangedRows ?? statisticsRefreshRows);
  const minDeadRows = threshold('minDeadRows', job?.data?.minDeadRows ?? vacuumDeadRows);
  const em = deps.orm.em.fork();
  // First the vacuums: each also analyzes its table, which then needs no ANALYZE of its own.
  const { vacuumed, skipped, deadBefore } = await vacuumDueTables(em, minDeadRows);
  if (vacuumed.length + skipped.length > 0) deps.logger.info({ vacuumed, skipped, deadBefore }, 'tables vacuumed');
  const due = await rows<{ relname: string }>(
    em,
    `select s.relname from pg_stat_user_tables s
      where s.schemaname = current_schema() and s.n_mod_since_analyze >= ?
        and (s.relname = any(?::text[]) or exists (select 1 from pg_inherits i where i.inhrelid = s.relid and i.inhparent = 'event'::regclass))
      order by s.relname`,
    [minChangedRows, pgArray(MAINTAINED_TABLES)],
  );
  const analyzed: string[] = [];
  for (const { relname } of due) {
    if (vacuumed.includes(relname)) continue;
    await rows(deps.orm.em.fork(), `analyze ${quoteIdent(relname)}`);
    analyzed.push(relname);
  }
  if (analyzed.length > 0) deps.logger.info({ analyzed }, 'statistics refreshed');
  return { analyzed, vacuumed };
}
