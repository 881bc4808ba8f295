// One project's slow webhook receivers do not hold up other projects' deliveries: with the default
// worker slots (2) and time limit (10 s), project A's receivers that never answer take at most
// WEBHOOK_PROJECT_CONCURRENCY (1) slot, so project B's delivery arrives at once (real API and worker,
// BullMQ on the real Redis, receivers on 127.0.0.1).
import type { EntityManager } from '@mikro-orm/postgresql';
import { describe, expect, it } from 'vitest';
import { enqueueWebhookDeliveries } from '../../../shared/platform/queues.ts';
import { queueWebhookEvent } from '../../../shared/webhooks/service.ts';
import { sql } from '../../db.ts';
import { apiAndWorker, call, eventually, type TestAccount } from '../../helpers.ts';
import { startReceiver } from '../../webhook-receiver.ts';

const {
  api,
  worker,
  accounts: [a, b],
} = await apiAndWorker({
  accounts: 2,
  configure: (config) => {
    config.webhooks.allowPrivateUrls = true; // the receivers are on 127.0.0.1
    config.webhooks.attempts = 1; // A's deliveries are not tried again after the test
  },
});

/** A webhook of `account` at `url`, subscribed to deletion.queued. */
async function createHook(account: TestAccount, url: string): Promise<number> {
  const created = await call(api.baseUrl, 'POST', `/api/projects/${account.projectId}/webhooks/`, {
    key: account.apiKey,
    body: { url, event_types: ['deletion.queued'] },
  });
  expect(created.status, created.text).toBe(201);
  return created.body.id;
}

/** One deletion.queued event of `account`'s project, handed to the queue: one delivery per webhook. */
async function queueEvent(account: TestAccount): Promise<string[]> {
  const ids = await (api.orm.em.fork() as EntityManager).transactional((tx) =>
    queueWebhookEvent(tx as EntityManager, account.projectId, 'deletion.queued', { n: 1 }),
  );
  await enqueueWebhookDeliveries(api.deps.queues.webhooks, ids);
  return ids;
}

describe('deliveries are fair across projects', () => {
  it("B's delivery arrives within 2 s while A's six receivers hang", async () => {
    // The defaults this is about.
    expect(worker.deps.config.worker.concurrency).toBe(2);
    expect(worker.deps.config.webhooks.timeoutMs).toBe(10_000);
    const hanging = await startReceiver(() => undefined); // never answers
    const fast = await startReceiver((c, res) => {
      c.answered = 200;
      res.writeHead(200).end();
    });
    try {
      for (let i = 0; i < 6; i++) await createHook(a, `${hanging.url}/${i}`);
      const hookB = await createHook(b, fast.url);
      expect(await queueEvent(a)).toHaveLength(6);
      // A's deliveries hold the worker (the first has reached its receiver).
      await eventually(async () => hanging.calls.length >= 1, 10_000, 20);

      const started = Date.now();
      const [idB] = await queueEvent(b);
      await eventually(async () => fast.calls.length === 1, 30_000, 20);
      const ms = Date.now() - started;
      expect(ms, `B's delivery took ${ms} ms`).toBeLessThan(2000);
      expect(JSON.parse(fast.calls[0].body)).toMatchObject({ id: idB, project_id: b.projectId });
      // A's receivers are still hanging (none of its attempts has ended), one at a time.
      expect(Date.now() - started).toBeLessThan(worker.deps.config.webhooks.timeoutMs);
      expect(hanging.calls).toHaveLength(worker.deps.config.webhooks.projectConcurrency);
      const delivered = await eventually(async () => {
        const page = await call(api.baseUrl, 'GET', `/api/projects/${b.projectId}/webhooks/${hookB}/deliveries/`, {
          key: b.apiKey,
        });
        return page.body.results[0]?.status === 'delivered' ? page.body.results[0] : null;
      });
      expect(delivered.attempts).toBe(1);
    } finally {
      await hanging.close();
      await fast.close();
      // A's deliveries end (their receiver is gone; one attempt each): none is left pending for other
      // files' reconcilers.
      await eventually(async () => {
        const [row] = await sql(
          api.orm,
          `select count(*)::int as n from webhook_delivery d join webhook w on w.id = d.webhook_id
            where w.project_id = ? and d.status = 'pending'`,
          [a.projectId],
        );
        return row.n === 0;
      }, 30_000);
    }
  });
});
