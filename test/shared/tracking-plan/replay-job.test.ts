// A large replay (more than QUARANTINE_REPLAY_INLINE_MAX selected) is answered 202 and left to the worker's
// job body, which stores each event once batch by batch and counts on the replay row; and the daily
// upkeep purges quarantined events past their retention and those of persons deleted since.
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { logger } from '../../../shared/platform/logger.ts';
import {
  insertReplay,
  purgeQuarantineJob,
  reconcileReplays,
  replayQuarantineJob,
} from '../../../shared/tracking-plan/index.ts';
import { sql } from '../../db.ts';
import { apiWithAccount, call } from '../../helpers.ts';

const { api, account } = await apiWithAccount((config) => {
  config.trackingPlan.replayInlineMax = 10;
});

const rest = (method: string, path: string, body?: unknown) =>
  call(api.baseUrl, method, `/api/projects/${account.projectId}/tracking_plan${path}`, { key: account.apiKey, body });
const deps = () => ({ orm: api.orm, logger, config: api.config });

describe('quarantine replay in the worker', () => {
  it('answers 202, and the job stores every event once, counting on the replay', async () => {
    await rest('PUT', '/', { events: { tap: { mode: 'quarantine', schema: { required: ['x'] } } } });
    const batch = Array.from({ length: 2500 }, (_, i) => ({
      event: 'tap',
      distinct_id: `u-${i % 50}`,
      uuid: randomUUID(),
      properties: { i },
    }));
    const sent = await call(api.baseUrl, 'POST', '/batch/', { body: { api_key: account.projectToken, batch } });
    expect(sent.status).toBe(200);
    await rest('PUT', '/', { events: { tap: { mode: 'quarantine' } } });

    const queued = await rest('POST', '/quarantine/replay/', { event: 'tap' });
    expect(queued.status).toBe(202);
    expect(queued.body.status).toBe('queued');
    const [first, again] = await Promise.all([
      replayQuarantineJob({ data: { replayId: queued.body.id } }, deps()),
      replayQuarantineJob({ data: { replayId: queued.body.id } }, deps()),
    ]);
    expect(first.stored + again.stored).toBe(2500);
    const [{ n, distinct }] = await sql(
      api.orm,
      `select count(*)::int as n, count(distinct uuid)::int as distinct from event where project_id = ? and event = 'tap'`,
      [account.projectId],
    );
    expect({ n, distinct }).toEqual({ n: 2500, distinct: 2500 });
    const status = await rest('GET', `/quarantine/replays/${queued.body.id}/`);
    expect(status.body).toMatchObject({ status: 'done', stored: 2500, still_violating: 0 });
    expect((await rest('GET', '/quarantine/')).body.count).toBe(0);
    expect((await rest('GET', '/quarantine/replays/999999999/')).status).toBe(404);
  });

  it('the daily upkeep purges what is past retention and what belongs to persons deleted since', async () => {
    const ins = (uuid: string, distinctId: string, age: string) =>
      sql(
        api.orm,
        `insert into quarantined_event (project_id, uuid, event, distinct_id, properties, timestamp, violations, plan_version, quarantined_at)
         values (?, ?, 'e', ?, '{}', now(), '[]', 1, now() - ?::interval)`,
        [account.projectId, uuid, distinctId, age],
      );
    const old = randomUUID();
    const young = randomUUID();
    const erased = randomUUID();
    await ins(old, 'a', `${api.config.trackingPlan.quarantineRetentionDays + 1} days`);
    await ins(young, 'a', '1 day');
    await ins(erased, 'erased-person', '1 day');
    await sql(
      api.orm,
      `insert into async_deletion (project_id, deletion_type, key, mode, distinct_ids) values (?, 'person', ?, 'immediate', array['erased-person'])`,
      [account.projectId, randomUUID()],
    );
    const purged = await purgeQuarantineJob(null, deps());
    expect(purged.quarantinedEventsPurged).toBeGreaterThanOrEqual(2);
    const left = await sql(api.orm, `select uuid from quarantined_event where uuid in (?)`, [[old, young, erased]]);
    expect(left.map((r) => r.uuid)).toEqual([young]);
  });

  it('a replay left queued (Redis away when it was asked) gets a job from the reconciler, once', async () => {
    const replay = await insertReplay(api.orm.em.fork(), account.projectId, {}, null, 'queued');
    await sql(api.orm, `update tracking_plan_replay set created_at = now() - interval '5 minutes' where id = ?`, [
      replay.id,
    ]);
    const reconcilerDeps = { orm: api.orm, logger, queues: api.deps.queues };
    expect((await reconcileReplays(reconcilerDeps)).enqueued).toBeGreaterThanOrEqual(1);
    const job = await api.deps.queues.maintenance.getJob(`replay-${replay.id}`);
    expect(job?.data).toEqual({ replayId: replay.id });
    // Its job is live: the next pass adds none for it.
    await reconcileReplays(reconcilerDeps);
    expect(await api.deps.queues.maintenance.getJobCountByTypes('waiting')).toBeGreaterThanOrEqual(1);
    await replayQuarantineJob({ data: { replayId: replay.id } }, deps());
    expect((await rest('GET', `/quarantine/replays/${replay.id}/`)).body.status).toBe('done');
    await job?.remove();
  });
});
