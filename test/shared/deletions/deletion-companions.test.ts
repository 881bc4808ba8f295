// A batch's companions: the jobs of requests another job deleted cost next to nothing. A job whose
// request is done (or held by a live batch) answers from one read of its row, claiming and writing
// nothing; the lead removes the queued jobs of the companions it completed, so they do not run at all.
// Real in-process BullMQ worker (one job at a time), real PostgreSQL and Redis.
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { sql } from '../../db.ts';
import { createAccount, eventually, ownDatabase, workerWithAccount } from '../../helpers.ts';
import { recordDeletionRequests } from '../../../shared/deletions/store.ts';
import { enqueueDeletions } from '../../../shared/platform/queues.ts';
import { deletePersonData } from '../../../shared/deletions/job.ts';
import { MikroORM } from '@mikro-orm/postgresql';
import { ormConfig } from '../../../shared/platform/db/orm.ts';

// A database of its own: another file's worker reconciling the shared one would take these due requests.
const database = await ownDatabase('deletion_companions');
const { worker, account } = await workerWithAccount((config) => {
  config.databaseUrl = database;
  config.databaseDirectUrl = database;
  // One job at a time: the first job of a batch leads it, the others wait in the queue meanwhile.
  config.worker.concurrency = 1;
});
const { orm } = worker.deps;

/** `n` persons with 2 events each in `projectId`, and an immediate event-deletion request for each. */
async function requests(projectId: number, n: number): Promise<string[]> {
  const persons = Array.from({ length: n }, () => randomUUID());
  await sql(
    orm,
    `insert into event (uuid, project_id, event, distinct_id, person_id, properties, timestamp, created_at)
     select gen_random_uuid(), ?, 'e', 'c-' || p::text, p, '{}', now() - interval '1 minute', now() - interval '1 minute'
       from unnest(?::uuid[]) p, generate_series(1, 2)`,
    [projectId, `{${persons.join(',')}}`],
  );
  return recordDeletionRequests(
    orm.em.fork(),
    persons.map((key) => ({
      projectId,
      type: 'person_events' as const,
      mode: 'immediate' as const,
      key,
      distinctIds: [`c-${key}`],
      createdById: null,
    })),
  );
}
const job = (id: string) => ({ id: 'direct', data: { deletionId: id }, updateProgress: async () => undefined }) as any;
const statusOf = async (ids: string[]) =>
  (
    await sql(orm, `select status from async_deletion where id = any(?::bigint[]) order by id`, [`{${ids.join(',')}}`])
  ).map((r) => r.status);

describe('a companion’s job', () => {
  it('reads only its own row when the request is done or held by a live batch: no claim, nothing written', async () => {
    const other = await createAccount(orm);
    const [lead, done, held, heldLead] = await requests(other.projectId, 4);
    // `done` completed by the batch of `lead` (run here); `held` in the batch of `heldLead`, whose lease is live.
    await sql(orm, `update async_deletion set status = 'cancelled' where id in (?, ?)`, [held, heldLead]);
    expect(await deletePersonData(job(lead), worker.deps)).toMatchObject({ requests: 2 });
    await sql(
      orm,
      `update async_deletion set status = 'running', claimed_by = ?, lease_until = now() + interval '1 hour' where id in (?, ?)`,
      [heldLead, held, heldLead],
    );
    // Their jobs on connections where PostgreSQL refuses every write: a claim (an update) would fail.
    const readOnly = await MikroORM.init({
      ...ormConfig(worker.deps.config.databaseUrl, 2),
      driverOptions: { options: '-c default_transaction_read_only=on' },
    });
    try {
      const deps = { ...worker.deps, orm: readOnly };
      expect(await deletePersonData(job(done), deps)).toEqual({ deleted: 0, skipped: 'already completed' });
      expect(await deletePersonData(job(held), deps)).toEqual({
        deleted: 0,
        skipped: `in the batch of deletion request ${heldLead}`,
      });
      // A request still to do goes on to its claim, which this connection refuses.
      await sql(orm, `update async_deletion set lease_until = now() - interval '1 second' where id in (?, ?)`, [
        held,
        heldLead,
      ]);
      await expect(deletePersonData(job(held), deps)).rejects.toThrow('read-only transaction');
    } finally {
      await readOnly.close();
      await sql(orm, `update async_deletion set status = 'cancelled' where id in (?, ?)`, [held, heldLead]);
    }
  });

  it('does not run once its batch completed: the lead removes the queued jobs of the requests it completed', async () => {
    const N = 20;
    const ids = await requests(account.projectId, N);
    const queue = worker.deps.queues.deletions;
    await enqueueDeletions(queue, ids);
    // Settled: every request completed and no job of theirs left waiting or running.
    const counts = await eventually(async () => {
      const c = await queue.getJobCounts('waiting', 'active', 'delayed', 'prioritized', 'completed', 'failed');
      const open = c.waiting + c.active + c.delayed + c.prioritized;
      return open === 0 && (await statusOf(ids)).every((s) => s === 'completed') ? c : null;
    }, 30_000);
    // Only the lead's job ran its body; the 19 others were removed before their turn.
    expect(counts).toMatchObject({ completed: 1, failed: 0 });
    const jobs = await Promise.all(ids.map((id) => queue.getJob(`deletion-${id}`)));
    expect(jobs[0]?.returnvalue).toEqual({ deleted: 2 * N, requests: N });
    expect(jobs.slice(1).filter(Boolean)).toEqual([]);
    expect(
      Number((await sql(orm, `select count(*)::int as n from event where project_id = ?`, [account.projectId]))[0].n),
    ).toBe(0);
  });
});
