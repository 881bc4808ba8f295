// Signed webhooks of deletion transitions, delivered by the real worker (in-process BullMQ on the real
// Redis) to receivers on 127.0.0.1: at least once per transition (a receiver that fails each delivery's
// first call gets exactly one successful call per transition), signed, retried with backoff, logged; a
// receiver that never answers is cut off by the time limit, and an endless answer is read only up to the cap.
import { createHmac, randomBytes, randomUUID } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/postgresql';
import { describe, expect, it } from 'vitest';
import type { Config } from '../../../shared/platform/config.ts';
import {
  claimDeletion,
  completeDeletions,
  dropLeases,
  recordDeletionRequests,
} from '../../../shared/deletions/store.ts';
import { enqueueWebhookDeliveries } from '../../../shared/platform/queues.ts';
import { deliverWebhook } from '../../../shared/webhooks/deliver.ts';
import { queueWebhookEvent } from '../../../shared/webhooks/service.ts';
import { insertWebhook, overdueDeliveryIds } from '../../../shared/webhooks/store.ts';
import { failsOnce, startReceiver, verified } from '../../webhook-receiver.ts';
import { reconcileWebhookDeliveries } from '../../../shared/webhooks/job.ts';
import { failEventDeletesOf, sql } from '../../db.ts';
import { capture } from '../../fixtures.ts';
import { call, createAccount, eventually, apiAndWorker, startApi } from '../../helpers.ts';

const TIMEOUT_MS = 1500;
// A deletion job fails finally at its first error (and its automatic retry is an hour away); a delivery
// is tried twice, 50 ms apart; an attempt is cut off after 1.5 s.
const settings = (config: Config) => {
  config.jobs.attempts = 1;
  config.jobs.backoffMs = 50;
  config.deletion.retryFirstDelaySeconds = 3600;
  config.webhooks.attempts = 2;
  config.webhooks.backoffMs = 50;
  config.webhooks.timeoutMs = TIMEOUT_MS;
  config.webhooks.maxResponseBytes = 64 * 1024;
  config.webhooks.allowPrivateUrls = true; // the receivers are on 127.0.0.1
};
const {
  prefix,
  api,
  worker,
  accounts: [account],
} = await apiAndWorker({ configure: settings });

const P = () => `/api/projects/${account.projectId}`;
const personByDistinctId = async (id: string) =>
  (await call(api.baseUrl, 'GET', `${P()}/persons/?distinct_id=${id}`, { key: account.apiKey })).body.results[0];
const deliveriesOf = async (webhookId: number, key = account.apiKey, projectId = account.projectId) =>
  (await call(api.baseUrl, 'GET', `/api/projects/${projectId}/webhooks/${webhookId}/deliveries/?limit=1000`, { key }))
    .body;

/** The secret of the webhook of delivery `id`, as stored. */
const webhookSecretOf = async (id: string) =>
  (
    await sql(api.orm, 'select w.secret from webhook w join webhook_delivery d on d.webhook_id = w.id where d.id = ?', [
      id,
    ])
  )[0].secret as string;

/** Nothing of the webhooks queue left to run: every job has completed or failed for good. */
const webhookQueueIdle = async () => {
  const counts = await worker.deps.queues.webhooks.getJobCounts('waiting', 'active', 'delayed', 'prioritized');
  return Object.values(counts).every((n) => n === 0);
};

/** A fault in PostgreSQL: deleting this distinct id's events raises, until the returned function removes it. */
const failDeletesOf = (distinctId: string) => failEventDeletesOf(api.orm, distinctId);

describe('deletion transitions', () => {
  it('each transition is delivered once to a receiver that fails every first call: signed, retried, logged', async () => {
    const receiver = await startReceiver(failsOnce);
    try {
      const created = await call(api.baseUrl, 'POST', `${P()}/webhooks/`, {
        key: account.apiKey,
        body: { url: receiver.url },
      });
      expect(created.status, created.text).toBe(201);
      const { id: webhookId, secret } = created.body;
      expect(secret).toMatch(/^whsec_[0-9a-f]{64}$/);
      expect(created.body.event_types).toEqual([
        'deletion.queued',
        'deletion.running',
        'deletion.completed',
        'deletion.failed',
        'deletion.cancelled',
        'scrub.queued',
        'scrub.running',
        'scrub.completed',
        'scrub.failed',
        'scrub.cancelled',
        'experiment.guardrail_tripped',
      ]);

      // One request completes (recordings: at once); another fails (its events cannot be deleted).
      await capture(api.baseUrl, account.projectToken, [{ event: 'e', distinct_id: 'wh-done' }]);
      await capture(api.baseUrl, account.projectToken, [{ event: 'e', distinct_id: 'wh-doomed' }]);
      const done = await personByDistinctId('wh-done');
      const doomed = await personByDistinctId('wh-doomed');
      const heal = await failDeletesOf('wh-doomed');
      try {
        const a = await call(api.baseUrl, 'POST', `${P()}/persons/${done.id}/delete_recordings/`, {
          key: account.apiKey,
        });
        expect(a.status, a.text).toBe(200);
        const b = await call(api.baseUrl, 'POST', `${P()}/persons/${doomed.id}/delete_events/`, {
          key: account.apiKey,
        });
        expect(b.status, b.text).toBe(200);
        const doneId = a.body.deletion_requests[0].id;
        const doomedId = b.body.deletion_requests[0].id;
        // A repeated request joins the pending one: no new transition, no event.
        const again = await call(api.baseUrl, 'POST', `${P()}/persons/${doomed.id}/delete_events/`, {
          key: account.apiKey,
        });
        expect(again.body.deletion_requests[0].id).toBe(doomedId);
        await worker.deps.queues.deletions.add('release-batch', { mode: 'off_peak' });

        const expected = [
          `${doneId} deletion.queued`,
          `${doneId} deletion.running`,
          `${doneId} deletion.completed`,
          `${doomedId} deletion.queued`,
          `${doomedId} deletion.running`,
          `${doomedId} deletion.failed`,
        ].sort();
        const log = await eventually(async () => {
          const page = await deliveriesOf(webhookId);
          return page.count === expected.length && page.results.every((d: any) => d.status !== 'pending') ? page : null;
        });
        await eventually(webhookQueueIdle);
        // A reconcile finds nothing of these left to send, however fresh (other files' deliveries, in the
        // same database, may be pending now).
        const ours = log.results.map((d: any) => d.id);
        expect(await overdueDeliveryIds(api.orm.em.fork() as EntityManager, { among: ours, graceSeconds: 0 })).toEqual(
          [],
        );

        const transitions = log.results.map((d: any) => `${d.payload.deletion.id} ${d.event_type}`).sort();
        expect(transitions).toEqual(expected);
        for (const d of log.results) {
          expect(d).toMatchObject({ status: 'delivered', attempts: 2, last_status_code: 200 });
          expect(d.attempt_log.map((x: any) => [x.status_code, x.error, x.response])).toEqual([
            [500, 'HTTP 500', 'try again'],
            [200, null, 'ok'],
          ]);
          expect(d.delivered_at).not.toBeNull();
        }

        // The receiver: two calls per delivery, the first failed, the second succeeded; exactly one
        // success per transition; the same body both times, each call signed with the webhook's secret.
        const successes = receiver.calls.filter((c) => c.answered === 200);
        expect(receiver.calls).toHaveLength(2 * expected.length);
        const bodies = successes.map((c) => JSON.parse(c.body));
        expect(bodies.map((b) => `${b.data.deletion.id} ${b.type}`).sort()).toEqual(expected);
        for (const c of receiver.calls) {
          expect(verified(secret, c.headers, c.body)).toBe(true);
          expect(verified('whsec_wrong', c.headers, c.body)).toBe(false);
          const body = JSON.parse(c.body);
          expect(c.headers['webhook-id']).toBe(body.id);
          expect(body.project_id).toBe(account.projectId);
          expect(c.headers['content-type']).toBe('application/json');
        }
        for (const s of successes) {
          const failed = receiver.calls.find(
            (c) => c.answered === 500 && c.headers['webhook-id'] === s.headers['webhook-id'],
          );
          expect(failed?.body).toBe(s.body);
        }

        // What each event says: the request's state after the transition; a completed one its receipt.
        const event = (id: string, type: string) => bodies.find((b) => b.data.deletion.id === id && b.type === type);
        expect(event(doneId, 'deletion.queued').data.deletion).toMatchObject({ status: 'pending', mode: 'immediate' });
        expect(event(doneId, 'deletion.running').data.deletion.status).toBe('running');
        const completed = event(doneId, 'deletion.completed').data;
        expect(completed.deletion.status).toBe('completed');
        expect(completed.receipt).toMatchObject({
          verified_at: completed.deletion.delete_verified_at,
          batch_lead_id: doneId,
          batch_requests: 1,
          batch_rows_deleted: 0,
        });
        expect(completed.receipt.verified_at).not.toBeNull();
        const failed = event(doomedId, 'deletion.failed').data.deletion;
        expect(failed).toMatchObject({ status: 'failed', failures: 1 });
        expect(failed.last_error).toContain('injected fault');

        // The operator's retry of the failed request: running and completed once more, each delivered once.
        await heal();
        const retried = await call(api.baseUrl, 'POST', `${P()}/persons/deletion_status/${doomedId}/retry/`, {
          key: account.apiKey,
        });
        expect(retried.status, retried.text).toBe(200);
        const after = await eventually(async () => {
          const page = await deliveriesOf(webhookId);
          return page.count === expected.length + 2 && page.results.every((d: any) => d.status === 'delivered')
            ? page
            : null;
        });
        await eventually(webhookQueueIdle);
        expect(after.results.slice(0, 2).map((d: any) => `${d.payload.deletion.id} ${d.event_type}`)).toEqual([
          `${doomedId} deletion.completed`,
          `${doomedId} deletion.running`,
        ]);
        expect(receiver.calls.filter((c) => c.answered === 200)).toHaveLength(expected.length + 2);
      } finally {
        await heal().catch(() => undefined);
      }
    } finally {
      await receiver.close();
    }
  });

  it('a claim starts a request (deletion.running) only when it was pending or failed, not on a re-claim of its own', async () => {
    const em = api.orm.em.fork() as EntityManager;
    const [id] = await recordDeletionRequests(em, [
      {
        projectId: account.projectId,
        type: 'person_recordings',
        mode: 'weekly',
        key: randomUUID(),
        distinctIds: [],
        createdById: null,
      },
    ]);
    expect(await claimDeletion(em, id, 30)).toMatchObject({ claimed: true, previousStatus: 'pending' });
    // Its attempt failed (the lease is dropped for the quick retry): the retry claims a running request.
    await dropLeases(em, [id]);
    expect(await claimDeletion(em, id, 30)).toMatchObject({ claimed: true, previousStatus: 'running' });
    // While the lease holds nobody claims it; the answer says what it was.
    expect(await claimDeletion(em, id, 30)).toMatchObject({ claimed: false, previousStatus: 'running' });
    await completeDeletions(em, [id]);
  });

  it('a delivery whose job was lost (Redis down at the commit) is sent by the reconciler', async () => {
    const receiver = await startReceiver((c, res) => {
      c.answered = 204;
      res.writeHead(204).end();
    });
    try {
      const other = await createAccount(api.orm);
      const created = await call(api.baseUrl, 'POST', `/api/projects/${other.projectId}/webhooks/`, {
        key: other.apiKey,
        body: { url: receiver.url, event_types: ['deletion.failed'] },
      });
      expect(created.status, created.text).toBe(201);
      // Written in a transaction, never handed to the queue.
      const ids = await (api.orm.em.fork() as EntityManager).transactional((tx) =>
        queueWebhookEvent(tx as EntityManager, other.projectId, 'deletion.failed', { lost: true }),
      );
      expect(ids).toHaveLength(1);
      // Not subscribed to this type: no delivery.
      const none = await (api.orm.em.fork() as EntityManager).transactional((tx) =>
        queueWebhookEvent(tx as EntityManager, other.projectId, 'deletion.queued', {}),
      );
      expect(none).toEqual([]);
      // Left to its own hand-off for a minute; then the reconciler sends it.
      const fresh = await reconcileWebhookDeliveries(worker.deps);
      expect(fresh.enqueued).toBe(0);
      await sql(api.orm, `update webhook_delivery set created_at = now() - interval '61 seconds' where id = ?`, [
        ids[0],
      ]);
      expect((await reconcileWebhookDeliveries(worker.deps)).enqueued).toBeGreaterThanOrEqual(1);
      const page = await eventually(async () => {
        const p = await deliveriesOf(created.body.id, other.apiKey, other.projectId);
        return p.results[0]?.status === 'delivered' ? p : null;
      });
      expect(page.results[0]).toMatchObject({ id: ids[0], attempts: 1, last_status_code: 204 });
      expect(JSON.parse(receiver.calls[0].body).data).toEqual({ lost: true });
    } finally {
      await receiver.close();
    }
  });
});

describe("the customer's URL is not trusted", () => {
  /** A webhook of a project of its own at `url` (with `secret` when given), and one event sent to it now. */
  async function sendOne(url: string, secret?: string) {
    const other = await createAccount(api.orm);
    const created = await call(api.baseUrl, 'POST', `/api/projects/${other.projectId}/webhooks/`, {
      key: other.apiKey,
      body: { url, secret },
    });
    expect(created.status, created.text).toBe(201);
    const ids = await (api.orm.em.fork() as EntityManager).transactional((tx) =>
      queueWebhookEvent(tx as EntityManager, other.projectId, 'deletion.queued', { n: 1 }),
    );
    await enqueueWebhookDeliveries(api.deps.queues.webhooks, ids);
    return eventually(async () => {
      const d = (await deliveriesOf(created.body.id, other.apiKey, other.projectId)).results[0];
      return d && d.status !== 'pending' ? d : null;
    });
  }

  it('a receiver that never answers is cut off at the time limit, and the delivery fails after its attempts', async () => {
    const receiver = await startReceiver(() => undefined); // never answers
    try {
      const started = Date.now();
      const delivery = await sendOne(receiver.url);
      expect(delivery).toMatchObject({ status: 'failed', attempts: 2, last_status_code: null, delivered_at: null });
      expect(delivery.last_error).toBe(`timed out after ${TIMEOUT_MS} ms`);
      for (const attempt of delivery.attempt_log) {
        expect(attempt.error).toBe(`timed out after ${TIMEOUT_MS} ms`);
        expect(attempt.duration_ms).toBeGreaterThanOrEqual(TIMEOUT_MS - 50);
        expect(attempt.duration_ms).toBeLessThan(TIMEOUT_MS + 5000);
      }
      expect(receiver.calls).toHaveLength(2);
      expect(Date.now() - started).toBeLessThan(30_000);
    } finally {
      await receiver.close();
    }
  });

  it('an endless answer is read only up to the cap: delivered at once, the connection closed', async () => {
    let written = 0;
    let closed = false;
    const receiver = await startReceiver((c, res) => {
      c.answered = 200;
      res.writeHead(200, { 'content-type': 'text/plain' });
      const chunk = Buffer.alloc(64 * 1024, 'x');
      res.on('close', () => {
        closed = true;
      });
      const pump = () => {
        while (!closed) {
          written += chunk.length;
          if (!res.write(chunk)) return void res.once('drain', pump);
        }
      };
      pump();
    });
    try {
      const delivery = await sendOne(receiver.url);
      expect(delivery).toMatchObject({ status: 'delivered', attempts: 1, last_status_code: 200, last_error: null });
      const [attempt] = delivery.attempt_log;
      // Read to the cap, not to the time limit (the answer never ends).
      expect(attempt.duration_ms).toBeLessThan(TIMEOUT_MS);
      expect(attempt.response).toBe('x'.repeat(500));
      await eventually(async () => closed);
      // More than the cap was on its way.
      expect(written).toBeGreaterThan(64 * 1024);
    } finally {
      await receiver.close();
    }
  });

  it('signed as Standard Webhooks says: the standardwebhooks library verifies each call, whatever the secret', async () => {
    const receiver = await startReceiver((c, res) => {
      c.answered = 200;
      res.writeHead(200).end();
    });
    try {
      const ownKey = randomBytes(24);
      // Generated; a Standard Webhooks secret of the customer's (whsec_ and base64); one of 16+ characters
      // that is not base64, used as it is (the library's raw format).
      for (const [given, raw] of [
        [undefined, false],
        [`whsec_${ownKey.toString('base64')}`, false],
        ['my-own-secret-0123456789', true],
      ] as const) {
        const before = receiver.calls.length;
        const delivery = await sendOne(receiver.url, given);
        expect(delivery.status, given).toBe('delivered');
        const [c] = receiver.calls.slice(before);
        const secret = given ?? (await webhookSecretOf(delivery.id));
        const body = JSON.parse(c.body);
        expect(c.headers['webhook-id']).toBe(body.id);
        expect(c.headers['webhook-id']).toBe(delivery.id);
        expect(Number(c.headers['webhook-timestamp'])).toBeCloseTo(Date.now() / 1000, -2);
        expect(c.headers['webhook-signature']).toMatch(/^v1,[A-Za-z0-9+/]{43}=$/);
        expect(verified(secret, c.headers, c.body, raw), given).toBe(true);
        // Another body, another id or another key: refused.
        expect(verified(secret, c.headers, `${c.body} `, raw)).toBe(false);
        expect(verified(secret, { ...c.headers, 'webhook-id': `${delivery.id}0` }, c.body, raw)).toBe(false);
        expect(verified(`whsec_${randomBytes(24).toString('base64')}`, c.headers, c.body)).toBe(false);
        if (given?.startsWith('whsec_')) {
          // The spec's construction by hand: HMAC-SHA256 over id.timestamp.body, keyed with the decoded secret.
          const signed = `${c.headers['webhook-id']}.${c.headers['webhook-timestamp']}.${c.body}`;
          expect(c.headers['webhook-signature']).toBe(
            `v1,${createHmac('sha256', ownKey).update(signed).digest('base64')}`,
          );
        }
      }
    } finally {
      await receiver.close();
    }
  });

  it('a redirect is not followed: it counts as a failed attempt', async () => {
    const target = await startReceiver((c, res) => {
      c.answered = 200;
      res.writeHead(200).end();
    });
    const receiver = await startReceiver((c, res) => {
      c.answered = 302;
      res.writeHead(302, { location: target.url }).end();
    });
    try {
      const delivery = await sendOne(receiver.url);
      expect(delivery).toMatchObject({ status: 'failed', attempts: 2, last_status_code: 302, last_error: 'HTTP 302' });
      expect(target.calls).toHaveLength(0);
    } finally {
      await receiver.close();
      await target.close();
    }
  });
});

describe("the worker's settings decide a delivery's attempts, not the queuing process's", () => {
  it.each([5, 1])('an API with WEBHOOK_ATTEMPTS=%i queues, the worker (2) makes 2 attempts', async (apiAttempts) => {
    const receiver = await startReceiver((c, res) => {
      c.answered = 503;
      res.writeHead(503).end('down');
    });
    // An API process of another configuration on the same queues.
    const other = await startApi((config) => {
      settings(config);
      config.redisPrefix = prefix;
      config.webhooks.attempts = apiAttempts;
    });
    try {
      const owner = await createAccount(api.orm);
      const created = await call(other.baseUrl, 'POST', `/api/projects/${owner.projectId}/webhooks/`, {
        key: owner.apiKey,
        body: { url: receiver.url },
      });
      expect(created.status, created.text).toBe(201);
      const ids = await (other.orm.em.fork() as EntityManager).transactional((tx) =>
        queueWebhookEvent(tx as EntityManager, owner.projectId, 'deletion.queued', { n: 1 }),
      );
      await enqueueWebhookDeliveries(other.deps.queues.webhooks, ids);
      const delivery = await eventually(async () => {
        const d = (await deliveriesOf(created.body.id, owner.apiKey, owner.projectId)).results[0];
        return d && d.status !== 'pending' ? d : null;
      });
      // Its job is done too: no attempt is left to come.
      await eventually(async () => {
        const job = await worker.deps.queues.webhooks.getJob(`webhook-delivery-${ids[0]}`);
        return job && ((await job.isCompleted()) || (await job.isFailed()));
      });
      expect(delivery).toMatchObject({ status: 'failed', attempts: 2, last_status_code: 503, next_attempt_at: null });
      expect(receiver.calls).toHaveLength(2);
      expect((await deliveriesOf(created.body.id, owner.apiKey, owner.projectId)).results[0].attempts).toBe(2);
    } finally {
      await other.close();
      await receiver.close();
    }
  });
});

describe('a delivery to a private address is refused by default (WEBHOOK_ALLOW_PRIVATE_URLS unset)', () => {
  it('a name resolving to 127.0.0.1, and 127.0.0.1, 10.x, 169.254.169.254, [::1], IPv4 carried in IPv6 and special-purpose ranges: failed at once, nothing sent', async () => {
    const receiver = await startReceiver((c, res) => {
      c.answered = 200;
      res.writeHead(200).end();
    });
    const port = new URL(receiver.url).port;
    const other = await createAccount(api.orm);
    const defaults = { ...worker.deps.config.webhooks, allowPrivateUrls: false };
    try {
      for (const [url, address] of [
        [`http://localhost:${port}/hook`, '127.0.0.1'], // created while allowed, or when the name resolved elsewhere
        [`http://127.0.0.1:${port}/hook`, '127.0.0.1'],
        ['http://10.20.30.40/hook', '10.20.30.40'],
        ['http://169.254.169.254/latest/meta-data/', '169.254.169.254'],
        [`http://[::1]:${port}/hook`, '::1'],
        [`http://[::127.0.0.1]:${port}/hook`, '::7f00:1'],
        [`http://[::ffff:127.0.0.1]:${port}/hook`, '::ffff:7f00:1'],
        ['http://[64:ff9b::127.0.0.1]/hook', '64:ff9b::7f00:1'],
        ['http://[2002:7f00:1::]/hook', '2002:7f00:1::'],
        ['http://100.64.0.1/hook', '100.64.0.1'],
        ['http://192.0.0.192/hook', '192.0.0.192'],
        ['http://198.18.0.1/hook', '198.18.0.1'],
        ['http://224.0.0.1/hook', '224.0.0.1'],
        ['http://255.255.255.255/hook', '255.255.255.255'],
      ]) {
        const em = api.orm.em.fork() as EntityManager;
        // Stored as it was accepted (the check at creation is tested over the API).
        const webhook = await insertWebhook(em, other.projectId, null, {
          url,
          secret: 'a-secret-of-the-test-0123',
          eventTypes: ['deletion.queued'],
          enabled: true,
        });
        const [id] = await em.transactional((tx) =>
          queueWebhookEvent(tx as EntityManager, other.projectId, 'deletion.queued', { n: 1 }),
        );
        // The job body with the default settings: not the last attempt, yet the delivery fails for good.
        const result = await deliverWebhook(
          api.orm.em.fork() as EntityManager,
          id,
          { number: 1, last: false },
          defaults,
        );
        expect(result, url).toMatchObject({ refused: expect.stringContaining(address) });
        const [delivery] = (await deliveriesOf(webhook.id, other.apiKey, other.projectId)).results;
        expect(delivery, url).toMatchObject({
          status: 'failed',
          attempts: 1,
          last_status_code: null,
          next_attempt_at: null,
        });
        expect(delivery.last_error).toContain(address);
        await em.getConnection().execute('delete from webhook where id = ?', [webhook.id]);
      }
      expect(receiver.calls).toHaveLength(0);
      // The same receiver, allowed: delivered (the refusal above was the rule, not the receiver).
      const em = api.orm.em.fork() as EntityManager;
      const allowed = await insertWebhook(em, other.projectId, null, {
        url: `http://localhost:${port}/hook`,
        secret: 'a-secret-of-the-test-0123',
        eventTypes: ['deletion.queued'],
        enabled: true,
      });
      const [id] = await em.transactional((tx) =>
        queueWebhookEvent(tx as EntityManager, other.projectId, 'deletion.queued', { n: 2 }),
      );
      const sent = await deliverWebhook(
        api.orm.em.fork() as EntityManager,
        id,
        { number: 1, last: false },
        { ...defaults, allowPrivateUrls: true },
      );
      expect(sent).toMatchObject({ statusCode: 200 });
      expect(receiver.calls).toHaveLength(1);
      expect((await deliveriesOf(allowed.id, other.apiKey, other.projectId)).results[0].status).toBe('delivered');
    } finally {
      await receiver.close();
    }
  });
});
