// Suppression (issue #32, point 5): suppress=true on a deletion request makes capture drop the later
// events of the erased persons' distinct ids — counted in the request's status, in a metric and as an
// ingestion warning — until unsuppress; without it a new event makes a new person, as in PostHog.
// Two real API processes (each with its suppression cache listening), PostgreSQL and Redis.
import { PostHog } from 'posthog-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../../db.ts';
import { capture } from '../../fixtures.ts';
import { call, createAccount, startApi, uniqueRedisPrefix, type TestAccount, type TestApi } from '../../helpers.ts';
import { metricValue, scrape } from '../ops/exposition.ts';
import { pgArray } from '../../../shared/platform/db/sql.ts';
import { SuppressionCache } from '../../../api/capture/suppression-cache.ts';

const TOKEN = 'suppression-metrics-token';
const prefix = uniqueRedisPrefix();
let api: TestApi;
let replica: TestApi;
let account: TestAccount;
let other: TestAccount;

beforeAll(async () => {
  const configure = (config: TestApi['config']) => {
    config.redisPrefix = prefix;
    config.metricsToken = TOKEN;
  };
  api = await startApi(configure, { suppressionCache: true });
  replica = await startApi(configure, { suppressionCache: true });
  account = await createAccount(api.orm);
  other = await createAccount(api.orm);
});
afterAll(async () => {
  await api?.close();
  await replica?.close();
});

const P = (projectId = account.projectId) => `/api/projects/${projectId}/persons`;
const get = (path: string, who = account) => call(api.baseUrl, 'GET', path, { key: who.apiKey });
const post = (path: string, options: { body?: unknown; key?: string } = {}) =>
  call(api.baseUrl, 'POST', path, { key: account.apiKey, ...options });
const del = (path: string) => call(api.baseUrl, 'DELETE', path, { key: account.apiKey });
const personByDistinctId = async (id: string, who = account) =>
  (await get(`${P(who.projectId)}/?distinct_id=${encodeURIComponent(id)}`, who)).body.results[0];
/** Events of these distinct ids sent in `phase` (a property every test event carries). */
const stored = async (distinctIds: string[], phase: string, projectId = account.projectId) =>
  (
    await sql(
      api.orm,
      `select count(*)::int as n from event where project_id = ? and distinct_id = any(?::text[]) and properties->>'phase' = ?`,
      [projectId, pgArray(distinctIds), phase],
    )
  )[0].n;
const events = (distinctId: string, n: number, phase: string) =>
  Array.from({ length: n }, (_, i) => ({ event: 'e', distinct_id: distinctId, properties: { phase, i } }));
const statusOf = async (personUuid: string) =>
  (await get(`${P()}/deletion_status/?person_uuid=${personUuid}`)).body.results as Record<string, any>[];
const suppressedMetric = async (target: TestApi) => {
  const res = await scrape(target.baseUrl, TOKEN, '/metrics');
  expect(res.status).toBe(200);
  return metricValue(res.text, 'events_suppressed_total');
};
/** A person with two distinct ids (`<name>-anon` identified as `<name>-user`), with one event each before. */
async function identifiedPerson(name: string) {
  await capture(api.baseUrl, account.projectToken, [
    { event: 'e', distinct_id: `${name}-anon`, properties: { phase: 'before' } },
    {
      event: '$identify',
      distinct_id: `${name}-user`,
      properties: { phase: 'before', $anon_distinct_id: `${name}-anon` },
    },
  ]);
  const person = await personByDistinctId(`${name}-user`);
  expect(person.distinct_ids.sort()).toEqual([`${name}-anon`, `${name}-user`]);
  return person as { id: number; uuid: string; distinct_ids: string[] };
}

describe('without suppress (the default, as PostHog)', () => {
  it('a new event after the deletion makes a new person, and the request shows no suppression', async () => {
    const person = await identifiedPerson('plain');
    expect((await del(`${P()}/${person.uuid}/?delete_events=true`)).status).toBe(204);
    await capture(api.baseUrl, account.projectToken, events('plain-user', 2, 'after'));
    expect(await stored(['plain-user'], 'after')).toBe(2);
    const reborn = await personByDistinctId('plain-user');
    expect(reborn).toBeDefined();
    expect(reborn.uuid).not.toBe(person.uuid);
    expect(await statusOf(person.uuid)).toEqual([
      expect.objectContaining({ deletion_type: 'person_events', suppression: null, suppressed_events: 0 }),
    ]);
  });
});

describe('suppress=true', () => {
  let person: { id: number; uuid: string; distinct_ids: string[] };
  let requestId: string;

  it('DELETE person: later events of its distinct ids are dropped (via /batch and posthog-node), counted in the status, the metric and a warning', async () => {
    person = await identifiedPerson('gone');
    const metricBefore = await suppressedMetric(api);
    // Made before any suppression existed: the project's (empty) entry is in the cache.
    await capture(api.baseUrl, account.projectToken, events('warm', 1, 'warm'));

    expect((await del(`${P()}/${person.uuid}/?delete_events=true&suppress=true`)).status).toBe(204);
    const [request] = await statusOf(person.uuid);
    expect(request).toMatchObject({ deletion_type: 'person_events', suppression: 'active', suppressed_events: 0 });
    requestId = request.id;

    // /batch: 5 of the suppressed person's events, mixed with another distinct id's, which land.
    await capture(api.baseUrl, account.projectToken, [
      ...events('gone-user', 3, 'after'),
      ...events('bystander', 2, 'after'),
      ...events('gone-anon', 2, 'after'),
    ]);
    // posthog-node (gzip): 4 more, one of them an $identify of a new id merging with a suppressed one.
    const posthog = new PostHog(account.projectToken, {
      host: api.baseUrl,
      flushAt: 10,
      flushInterval: 0,
      fetchRetryCount: 0,
    });
    for (let i = 0; i < 3; i++)
      posthog.capture({ distinctId: 'gone-user', event: 'node', properties: { phase: 'after' } });
    posthog.capture({
      distinctId: 'gone-new-login',
      event: '$identify',
      properties: { phase: 'after', $anon_distinct_id: 'gone-anon' },
    });
    await posthog.shutdown();

    expect(await stored(['gone-user', 'gone-anon', 'gone-new-login'], 'after')).toBe(0);
    expect(await stored(['bystander'], 'after')).toBe(2);
    expect(await personByDistinctId('gone-user')).toBeUndefined();
    expect(await personByDistinctId('gone-anon')).toBeUndefined();
    expect(await personByDistinctId('bystander')).toBeDefined();

    const [after] = await statusOf(person.uuid);
    expect(after).toMatchObject({ id: requestId, suppression: 'active', suppressed_events: 9 });
    expect((await suppressedMetric(api)) - metricBefore).toBe(9);

    // One warning per capture request that dropped events.
    const warnings = await sql(
      api.orm,
      `select distinct_id, details from ingestion_warning where project_id = ? and type = 'event_dropped_suppressed'`,
      [account.projectId],
    );
    expect(warnings).toHaveLength(2);
    expect(warnings.map((w) => w.details.droppedEvents).sort()).toEqual([4, 5]);
    expect(warnings.flatMap((w) => w.details.distinctIds).sort()).toEqual([
      'gone-anon',
      'gone-anon',
      'gone-user',
      'gone-user',
    ]);

    // Who suppressed what, in the activity log.
    const [entry] = await sql(
      api.orm,
      `select user_id, activity, detail from activity_log where project_id = ? and scope = 'DeletionRequest' and item_id = ?`,
      [account.projectId, requestId],
    );
    expect(entry).toMatchObject({ user_id: account.userId, activity: 'suppressed' });
    expect(entry.detail.changes[0].after.sort()).toEqual(['gone-anon', 'gone-user']);
  });

  it("another project's events of the same distinct id land", async () => {
    await capture(api.baseUrl, other.projectToken, events('gone-user', 2, 'after'));
    expect(await stored(['gone-user'], 'after', other.projectId)).toBe(2);
    expect(await personByDistinctId('gone-user', other)).toBeDefined();
  });

  it('unsuppress: events land again and make a new person; the status keeps the count; logged once', async () => {
    const res = await post(`${P()}/deletion_status/${requestId}/unsuppress/`);
    expect(res.status, res.text).toBe(200);
    expect(res.body).toMatchObject({ id: requestId, suppression: 'lifted', suppressed_events: 9 });

    await capture(api.baseUrl, account.projectToken, events('gone-user', 2, 'lifted'));
    expect(await stored(['gone-user'], 'lifted')).toBe(2);
    const reborn = await personByDistinctId('gone-user');
    expect(reborn).toBeDefined();
    expect(reborn.uuid).not.toBe(person.uuid);
    expect((await statusOf(person.uuid))[0]).toMatchObject({ suppression: 'lifted', suppressed_events: 9 });

    // Again: the same answer, no second entry.
    const again = await post(`${P()}/deletion_status/${requestId}/unsuppress/`);
    expect(again.status).toBe(200);
    expect(again.body).toMatchObject({ id: requestId, suppression: 'lifted' });
    const entries = await sql(
      api.orm,
      `select activity, user_id, detail from activity_log where scope = 'DeletionRequest' and item_id = ? order by created_at`,
      [requestId],
    );
    expect(entries.map((e) => e.activity)).toEqual(['suppressed', 'unsuppressed']);
    expect(entries[1].detail.changes[0].before.sort()).toEqual(['gone-anon', 'gone-user']);
  });

  it('delete_events and bulk_delete (body) suppress too; bulk suppresses each person under its own request', async () => {
    await capture(api.baseUrl, account.projectToken, [
      ...events('kept-a', 1, 'before'),
      ...events('bulk-b', 1, 'before'),
      ...events('bulk-c', 1, 'before'),
    ]);
    const a = await personByDistinctId('kept-a');
    const made = await post(`${P()}/${a.id}/delete_events/?suppress=true`);
    expect(made.status, made.text).toBe(200);
    expect(made.body.deletion_requests[0]).toMatchObject({ suppression: 'active', suppressed_events: 0 });

    const bulk = await post(`${P()}/bulk_delete/`, {
      body: { distinct_ids: ['bulk-b', 'bulk-c'], delete_recordings: true, suppress: true },
    });
    expect(bulk.status, bulk.text).toBe(200);
    expect(bulk.body.deletion_requests).toHaveLength(2);
    expect(bulk.body.deletion_requests.every((r: { suppression: string }) => r.suppression === 'active')).toBe(true);

    await capture(api.baseUrl, account.projectToken, [
      ...events('kept-a', 2, 'after'),
      ...events('bulk-b', 3, 'after'),
      ...events('bulk-c', 1, 'after'),
    ]);
    expect(await stored(['kept-a', 'bulk-b', 'bulk-c'], 'after')).toBe(0);
    // delete_events keeps the person; its events stop arriving.
    expect(await personByDistinctId('kept-a')).toBeDefined();
    const counts = Object.fromEntries(
      (await get(`${P()}/deletion_status/?limit=100`)).body.results
        .filter((r: { suppression: string | null }) => r.suppression)
        .map((r: { person_uuid: string; suppressed_events: number }) => [r.person_uuid, r.suppressed_events]),
    );
    expect(counts[a.uuid]).toBe(2);
    expect(Object.values(counts).sort()).toEqual([1, 2, 3, 9]);
  });
});

describe('bad requests', () => {
  it('dry_run with suppress is 400 with PostHog’s error body, and changes nothing', async () => {
    await capture(api.baseUrl, account.projectToken, events('dry-s', 1, 'before'));
    const person = await personByDistinctId('dry-s');
    for (const res of [
      await del(`${P()}/${person.uuid}/?dry_run=true&delete_events=true&suppress=true`),
      await post(`${P()}/${person.id}/delete_events/?dry_run=true&suppress=true`),
      await post(`${P()}/bulk_delete/?dry_run=true&suppress=true`, { body: { ids: [person.uuid] } }),
      await post(`${P()}/bulk_delete/`, { body: { ids: [person.uuid], dry_run: true, suppress: true } }),
    ]) {
      expect(res.status, res.text).toBe(400);
      expect(res.body).toEqual({
        type: 'validation_error',
        code: 'invalid_input',
        detail: expect.stringContaining('dry_run cannot be combined with suppress'),
        attr: 'suppress',
      });
    }
    // suppress=false with a dry run is a dry run.
    expect((await del(`${P()}/${person.uuid}/?dry_run=true&suppress=false`)).body).toMatchObject({ dry_run: true });
    // suppress without a data deletion has no request to belong to.
    const bare = await del(`${P()}/${person.uuid}/?suppress=true`);
    expect(bare.status).toBe(400);
    expect(bare.body).toMatchObject({ type: 'validation_error', attr: 'suppress' });
    expect(await personByDistinctId('dry-s')).toBeDefined();
    expect(await statusOf(person.uuid)).toEqual([]);
    expect(
      (await sql(api.orm, `select count(*)::int as n from deletion_suppression where distinct_id = 'dry-s'`))[0].n,
    ).toBe(0);
  });

  it('unsuppress: an unknown id, a malformed one or another project’s is 404; a request without suppression is 409', async () => {
    for (const id of ['999999999999', 'abc', '99999999999999999999']) {
      const res = await post(`${P()}/deletion_status/${id}/unsuppress/`);
      expect(res.status, id).toBe(404);
      expect(res.body).toMatchObject({ type: 'invalid_request', code: 'not_found' });
    }
    await capture(api.baseUrl, other.projectToken, events('foreign', 1, 'before'));
    const foreign = await personByDistinctId('foreign', other);
    const made = await call(
      api.baseUrl,
      'DELETE',
      `${P(other.projectId)}/${foreign.uuid}/?delete_events=true&suppress=true`,
      {
        key: other.apiKey,
      },
    );
    expect(made.status).toBe(204);
    const [foreignRequest] = (await get(`${P(other.projectId)}/deletion_status/`, other)).body.results.filter(
      (r: { person_uuid: string }) => r.person_uuid === foreign.uuid,
    );
    expect((await post(`${P()}/deletion_status/${foreignRequest.id}/unsuppress/`)).status).toBe(404);

    await capture(api.baseUrl, account.projectToken, events('unsuppressed-never', 1, 'before'));
    const p = await personByDistinctId('unsuppressed-never');
    const plain = await post(`${P()}/${p.id}/delete_events/`);
    const res = await post(`${P()}/deletion_status/${plain.body.deletion_requests[0].id}/unsuppress/`);
    expect(res.status).toBe(409);
    expect(res.body).toMatchObject({ type: 'invalid_request', code: 'conflict' });
  });
});

describe('a project with more suppressions than a cache holds', () => {
  it('is looked up per capture request instead, with the same outcome', async () => {
    const cache = new SuppressionCache(api.config.databaseDirectUrl, { maxHeldPerProject: 1 });
    await cache.start();
    try {
      const em = api.orm.em.fork();
      const all = await cache.suppressed(em, account.projectId, ['gone-user', 'kept-a', 'bulk-b', 'nobody']);
      // gone-user's suppression was lifted; kept-a and bulk-b are still suppressed (more than 1).
      expect([...all.keys()].sort()).toEqual(['bulk-b', 'kept-a']);
      const small = new SuppressionCache(api.config.databaseDirectUrl);
      await small.start();
      try {
        expect([...(await small.suppressed(em, account.projectId, ['kept-a', 'nobody'])).keys()]).toEqual(['kept-a']);
        expect([...(await small.suppressed(em, other.projectId, ['kept-a'])).keys()]).toEqual([]);
      } finally {
        await small.stop();
      }
    } finally {
      await cache.stop();
    }
  });
});

describe('several API processes', () => {
  it('a second process sees a suppression made on the first without restarting (deletion_suppression_changed)', async () => {
    const cache = replica.deps.suppressionCache!;
    expect(cache.active).toBe(true);
    await capture(replica.baseUrl, account.projectToken, events('cross', 1, 'before'));
    const person = await personByDistinctId('cross');
    // The replica holds the project's suppressions now; the change on `api` must reach it.
    const invalidated = new Promise<void>((resolve) => {
      const seen = (projects: Set<number> | 'all') => {
        if (projects === 'all' || projects.has(account.projectId)) {
          cache.off('invalidated', seen);
          resolve();
        }
      };
      cache.on('invalidated', seen);
    });
    const metricBefore = await suppressedMetric(replica);
    expect((await del(`${P()}/${person.uuid}/?delete_events=true&suppress=true`)).status).toBe(204);
    await invalidated;
    await capture(replica.baseUrl, account.projectToken, events('cross', 4, 'after'));
    expect(await stored(['cross'], 'after')).toBe(0);
    expect((await suppressedMetric(replica)) - metricBefore).toBe(4);
    expect((await statusOf(person.uuid))[0]).toMatchObject({ suppression: 'active', suppressed_events: 4 });
  });
});
