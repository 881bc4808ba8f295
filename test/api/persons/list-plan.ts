// The plan PostgreSQL picks for a person list's page query, for tests that pin which index serves a filter.
import type { EntityManager } from '@mikro-orm/postgresql';
import { rows } from '../../../shared/platform/db/sql.ts';
import { personListFilter } from '../../../shared/persons/store.ts';

/**
 * EXPLAIN of the list's page query for these property filters, sequential scans ruled out (test tables
 * are small); `settings` are more `set local …` statements, e.g. `timezone = 'UTC'`.
 */
export async function listPlan(
  em: EntityManager,
  projectId: number,
  filter: unknown[],
  settings: string[] = [],
): Promise<string> {
  return em.transactional(async (tx) => {
    for (const setting of ['enable_seqscan = off', ...settings])
      await tx.getConnection().execute(`set local ${setting}`, [], 'run', tx.getTransactionContext());
    const where = await personListFilter(tx, projectId, { properties: filter });
    const plan = await rows<{ 'QUERY PLAN': string }>(
      tx,
      `explain select p.* from person p where ${where.sql} order by p.created_at desc, p.id desc limit 101`,
      where.params,
    );
    return plan.map((row) => row['QUERY PLAN']).join('\n');
  });
}
