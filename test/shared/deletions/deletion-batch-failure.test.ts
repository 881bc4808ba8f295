// A request that cannot be deleted fails only itself: the batch it was claimed into is retried request
// by request, the others complete in the same run with exact receipts, and the guilty one counts only
// its own job's attempts. Real API, real in-process BullMQ worker, real PostgreSQL and Redis.
import { describe, expect, it } from 'vitest';
import { failEventDeletesOf, sql } from '../../db.ts';
import { capture } from '../../fixtures.ts';
import { call, eventually, apiAndWorker } from '../../helpers.ts';
import type { Config } from '../../../shared/platform/config.ts';
import { deletePersonData } from '../../../shared/deletions/job.ts';

const ATTEMPTS = 3;
const settings = (config: Config) => {
  config.jobs.attempts = ATTEMPTS;
  config.jobs.backoffMs = 50;
  config.deletion.retryFirstDelaySeconds = 900; // the default: a failed request waits 15 minutes
  // One job at a time: the first request's job leads a batch of all 23 (two at once may split them).
  config.worker.concurrency = 1;
};
const {
  api,
  worker,
  accounts: [account],
} = await apiAndWorker({ configure: settings });

const P = () => `/api/projects/${account.projectId}/persons`;
const count = async (query: string, params: unknown[]) => (await sql(api.orm, query, params))[0].n as number;
const requestsOf = (projectId: number) =>
  sql(
    api.orm,
    `select id::text as id, key, status, attempts, failures, last_error, next_attempt_at, delete_verified_at
       from async_deletion where project_id = ? order by id`,
    [projectId],
  );

describe('one undeletable person in a window', () => {
  it('fails only its own request: the 22 others complete in the same run with their receipts', async () => {
    // Eleven persons, the undeletable one, eleven more: its group sits between the others' (by cutoff),
    // so the batch has committed some of theirs when it fails.
    const healthy = Array.from({ length: 22 }, (_, i) => `bf-ok-${i}`);
    const names = [...healthy.slice(0, 11), 'bf-guilty', ...healthy.slice(11)];
    await capture(
      api.baseUrl,
      account.projectToken,
      names.flatMap((d, i) =>
        Array.from({ length: (i % 4) + 1 }, (_, j) => ({ event: 'e', distinct_id: d, properties: { j } })),
      ),
    );
    const persons = new Map<string, { uuid: string; events: number }>();
    for (const d of names) {
      const person = (await call(api.baseUrl, 'GET', `${P()}/?distinct_id=${d}`, { key: account.apiKey })).body
        .results[0];
      const events = await count(`select count(*)::int as n from event where project_id = ? and distinct_id = ?`, [
        account.projectId,
        d,
      ]);
      persons.set(d, { uuid: person.uuid, events });
    }
    // 23 unrelated requests (one each, so 23 cutoffs) waiting for the weekly window.
    for (const d of names) {
      const res = await call(api.baseUrl, 'DELETE', `${P()}/${persons.get(d)!.uuid}/?delete_events=true`, {
        key: account.apiKey,
      });
      expect(res.status).toBe(204);
    }
    const heal = await failEventDeletesOf(api.orm, 'bf-guilty');
    let settled: Awaited<ReturnType<typeof requestsOf>>;
    try {
      await worker.deps.queues.deletions.add('release-batch', { mode: 'weekly' });
      // Settled: nothing pending or running any more, and the guilty request's job has failed finally.
      settled = await eventually(async () => {
        const rows = await requestsOf(account.projectId);
        return rows.length === 23 && rows.every((r) => r.status === 'completed' || r.status === 'failed') ? rows : null;
      }, 60_000);
    } finally {
      await heal();
    }
    const byKey = new Map(settled.map((r) => [r.key, r]));
    const guilty = byKey.get(persons.get('bf-guilty')!.uuid)!;
    const others = healthy.map((d) => byKey.get(persons.get(d)!.uuid)!);

    expect(others.map((r) => [r.status, r.failures, r.last_error])).toEqual(others.map(() => ['completed', 0, null]));
    expect(others.every((r) => r.attempts === 1 && r.delete_verified_at !== null)).toBe(true);
    // The guilty request: failed by its own job's attempts only, with its own error, waiting for its retry.
    expect(guilty).toMatchObject({ status: 'failed', attempts: ATTEMPTS, failures: 1, delete_verified_at: null });
    expect(guilty.last_error).toContain('injected fault');
    expect(new Date(guilty.next_attempt_at).getTime() - Date.now()).toBeGreaterThan(800_000);

    // Every other person's events are gone, each receipt counting its own (though the failed batch had
    // already deleted some of them); the undeletable person's events are all there.
    for (const d of healthy) {
      expect(
        await count(`select count(*)::int as n from event where project_id = ? and distinct_id = ?`, [
          account.projectId,
          d,
        ]),
      ).toBe(0);
      const receipts = await call(api.baseUrl, 'GET', `${P()}/deletion_receipts/?person_uuid=${persons.get(d)!.uuid}`, {
        key: account.apiKey,
      });
      expect(receipts.body.count).toBe(1);
      expect(receipts.body.results[0].receipt.stores.events).toMatchObject({
        before: persons.get(d)!.events,
        after: 0,
      });
    }
    expect(
      await count(`select count(*)::int as n from event where project_id = ? and distinct_id = 'bf-guilty'`, [
        account.projectId,
      ]),
    ).toBe(persons.get('bf-guilty')!.events);
  }, 90_000);

  it('the undeletable person leading a bulk_delete’s batch: the others complete, its own job fails with its error', async () => {
    const names = ['bl-guilty', 'bl-ok-0', 'bl-ok-1', 'bl-ok-2'];
    await capture(
      api.baseUrl,
      account.projectToken,
      names.flatMap((d, i) => Array.from({ length: i + 2 }, () => ({ event: 'e', distinct_id: d }))),
    );
    const bulk = await call(api.baseUrl, 'POST', `${P()}/bulk_delete/`, {
      key: account.apiKey,
      body: { distinct_ids: names, delete_events: true },
    });
    expect(bulk.status).toBe(200);
    const ids: string[] = bulk.body.deletion_requests.map((r: { id: string }) => String(r.id));
    const rows = await sql(
      api.orm,
      `select id::text as id, distinct_ids[1] as d from async_deletion where id = any(?::bigint[]) order by id`,
      [`{${ids.join(',')}}`],
    );
    const guiltyId = rows.find((r) => r.d === 'bl-guilty')!.id;
    // Released (no jobs queued), then the undeletable person's job run here: it leads the batch of four.
    await sql(api.orm, `update async_deletion set released_at = now() where id = any(?::bigint[])`, [
      `{${ids.join(',')}}`,
    ]);
    const heal = await failEventDeletesOf(api.orm, 'bl-guilty');
    try {
      await expect(
        deletePersonData(
          { id: 'direct', data: { deletionId: guiltyId }, updateProgress: async () => undefined } as any,
          worker.deps,
        ),
      ).rejects.toThrow('injected fault');
    } finally {
      await heal();
    }
    const after = await sql(
      api.orm,
      `select id::text as id, status, attempts, claimed_by::text as claimed_by from async_deletion where id = any(?::bigint[]) order by id`,
      [`{${ids.join(',')}}`],
    );
    expect(after.filter((r) => r.id !== guiltyId).map((r) => [r.status, r.attempts, r.claimed_by])).toEqual(
      [1, 2, 3].map(() => ['completed', 1, guiltyId]),
    );
    // Its own attempt, counted once; the retry (BullMQ's) may claim it at once.
    expect(after.find((r) => r.id === guiltyId)).toMatchObject({ status: 'running', attempts: 1 });
    for (const d of names.slice(1))
      expect(
        await count(`select count(*)::int as n from event where project_id = ? and distinct_id = ?`, [
          account.projectId,
          d,
        ]),
      ).toBe(0);
  });
});
