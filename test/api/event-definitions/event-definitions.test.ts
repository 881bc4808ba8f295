import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { upsertEventDefinitions } from '../../../shared/event-definitions/seen.ts';
import { sql } from '../../db.ts';
import { capture } from '../../fixtures.ts';
import { call, createAccount, createKey, startApi, type TestAccount, type TestApi } from '../../helpers.ts';

let api: TestApi;
let account: TestAccount;
let other: TestAccount;
const P = () => `/api/projects/${account.projectId}/event_definitions`;

async function define(projectId: number, name: string, lastSeen: string | null) {
  await upsertEventDefinitions(
    api.orm.em.fork() as any,
    [{ projectId, event: name }],
    new Date('2019-01-01T00:00:00Z'),
  );
  await sql(api.orm, `update event_definition set last_seen_at = ? where project_id = ? and name = ?`, [
    lastSeen,
    projectId,
    name,
  ]);
}

beforeAll(async () => {
  api = await startApi();
  account = await createAccount(api.orm);
  other = await createAccount(api.orm);
  // PostHog's test data for ordering.
  await define(account.projectId, '$pageview', '2020-01-01T22:56:00Z');
  await define(account.projectId, 'entered_free_trial', '2020-01-01T23:00:00Z');
  await define(account.projectId, 'installed_app', '2020-01-01T00:00:00Z');
  await define(account.projectId, 'purchase', '2019-12-30T00:00:00Z');
  await define(account.projectId, 'rated_app', '2019-12-21T00:00:00Z');
  await define(account.projectId, 'watched_movie', null);
  await define(other.projectId, 'secret_event', '2020-01-01T00:00:00Z');
});
afterAll(() => api.close());

const names = async (query: string) =>
  (await call(api.baseUrl, 'GET', `${P()}/${query}`, { key: account.apiKey })).body.results.map((d: any) => d.name);

describe('list', () => {
  it('orders as PostHog does', async () => {
    expect(await names('?ordering=name')).toEqual([
      '$pageview',
      'entered_free_trial',
      'installed_app',
      'purchase',
      'rated_app',
      'watched_movie',
    ]);
    expect(await names('?ordering=-last_seen_at::date&ordering=-name')).toEqual([
      'installed_app',
      'entered_free_trial',
      '$pageview',
      'purchase',
      'rated_app',
      'watched_movie',
    ]);
    expect(await names('')).toEqual([
      '$pageview',
      'entered_free_trial',
      'installed_app',
      'purchase',
      'rated_app',
      'watched_movie',
    ]);
    expect(await names('?ordering=last_seen_at')).toEqual([
      'watched_movie',
      'rated_app',
      'purchase',
      'installed_app',
      '$pageview',
      'entered_free_trial',
    ]);
  });

  it('searches every term, case-insensitively, and filters by event_type and exclusions', async () => {
    expect(await names('?search=free%20tri')).toEqual(['entered_free_trial']);
    expect(await names('?search=ED%20mov%20')).toEqual(['watched_movie']);
    expect(await names('?search=app')).toEqual(['installed_app', 'rated_app']);
    expect(await names('?event_type=event_posthog')).toEqual(['$pageview']);
    expect((await names('?event_type=event_custom')).length).toBe(5);
    expect(await names(`?search=app&excluded_properties=${encodeURIComponent('["rated_app"]')}`)).toEqual([
      'installed_app',
    ]);
    expect((await call(api.baseUrl, 'GET', `${P()}/?event_type=bogus`, { key: account.apiKey })).status).toBe(400);
  });

  it('never shows another project’s definitions', async () => {
    expect(await names('?search=secret')).toEqual([]);
    const res = await call(api.baseUrl, 'GET', `/api/projects/${other.projectId}/event_definitions/`, {
      key: account.apiKey,
    });
    expect(res.status).toBe(403);
    expect(res.body.detail).toBe("You don't have access to the project.");
  });

  it('pages 306 definitions as 100/100/100/6 through next', async () => {
    const many = await createAccount(api.orm);
    await upsertEventDefinitions(
      api.orm.em.fork() as any,
      Array.from({ length: 306 }, (_, i) => ({ projectId: many.projectId, event: `event_${i}` })),
    );
    const sizes: number[] = [];
    let path: string | null = `/api/projects/${many.projectId}/event_definitions/`;
    while (path) {
      const res: any = await call(api.baseUrl, 'GET', path, { key: many.apiKey });
      expect(res.body.count).toBe(306);
      sizes.push(res.body.results.length);
      path = res.body.next ? res.body.next.slice(api.baseUrl.length) : null;
    }
    expect(sizes).toEqual([100, 100, 100, 6]);
  });
});

describe('retrieve, update, delete, metrics', () => {
  const byName = async (name: string) =>
    (await call(api.baseUrl, 'GET', `${P()}/?search=${name}`, { key: account.apiKey })).body.results.find(
      (d: any) => d.name === name,
    );

  it('retrieves with the enterprise field set; unknown or foreign ids are 404', async () => {
    const def = await byName('purchase');
    const res = await call(api.baseUrl, 'GET', `${P()}/${def.id}/`, { key: account.apiKey });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      name: 'purchase',
      description: '',
      tags: [],
      verified: false,
      hidden: false,
      is_action: false,
      post_to_slack: false,
      default_columns: [],
      owner: null,
    });
    expect((await call(api.baseUrl, 'GET', `${P()}/not-a-uuid/`, { key: account.apiKey })).status).toBe(404);
    const foreign = (
      await call(api.baseUrl, 'GET', `/api/projects/${other.projectId}/event_definitions/`, { key: other.apiKey })
    ).body.results[0];
    expect((await call(api.baseUrl, 'GET', `${P()}/${foreign.id}/`, { key: account.apiKey })).status).toBe(404);
  });

  it('updates description, de-duplicated tags and owner, with updated_by and an activity entry', async () => {
    const def = await byName('installed_app');
    const res = await call(api.baseUrl, 'PATCH', `${P()}/${def.id}/`, {
      key: account.apiKey,
      body: { description: 'Installs', tags: ['a', 'b', 'a'], owner: account.userId, name: 'ignored' },
    });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      name: 'installed_app',
      description: 'Installs',
      tags: ['a', 'b'],
      owner: { id: account.userId },
      updated_by: { id: account.userId },
    });
    const [entry] = await sql(
      api.orm,
      `select activity, detail from activity_log where scope = 'EventDefinition' and item_id = ?`,
      [def.id],
    );
    expect(entry.activity).toBe('changed');
    expect(entry.detail.changes.map((c: any) => c.field).sort()).toEqual(['description', 'owner', 'tags']);
    expect(
      (await call(api.baseUrl, 'PATCH', `${P()}/${def.id}/`, { key: account.apiKey, body: { owner: other.userId } }))
        .status,
    ).toBe(400);
  });

  it('applies the verify and hide rules', async () => {
    const def = await byName('rated_app');
    const url = `${P()}/${def.id}/`;
    const both = await call(api.baseUrl, 'PATCH', url, { key: account.apiKey, body: { verified: true, hidden: true } });
    expect(both.status).toBe(400);
    expect(both.body.detail).toBe('An event cannot be both hidden and verified');
    const verified = (await call(api.baseUrl, 'PATCH', url, { key: account.apiKey, body: { verified: true } })).body;
    expect(verified).toMatchObject({ verified: true, verified_by: { id: account.userId } });
    const again = (await call(api.baseUrl, 'PATCH', url, { key: account.apiKey, body: { verified: true } })).body;
    expect(again.verified_at).toBe(verified.verified_at);
    const hidden = (await call(api.baseUrl, 'PATCH', url, { key: account.apiKey, body: { hidden: true } })).body;
    expect(hidden).toMatchObject({ hidden: true, verified: false, verified_by: null, verified_at: null });
    expect(await names('?search=rated&exclude_hidden=true')).toEqual([]);
    expect(await names('?search=rated')).toEqual(['rated_app']);
  });

  it("accepts PUT as a full update: PATCH's rules, and post_to_slack back to its default when left out", async () => {
    const def = await byName('entered_free_trial');
    const url = `${P()}/${def.id}/`;
    const patched = await call(api.baseUrl, 'PATCH', url, {
      key: account.apiKey,
      body: { post_to_slack: true, tags: ['kept'] },
    });
    expect(patched.body).toMatchObject({ post_to_slack: true, tags: ['kept'] });
    const put = await call(api.baseUrl, 'PUT', url, {
      key: account.apiKey,
      body: { description: 'Trials', verified: true, name: 'ignored' },
    });
    expect(put.status).toBe(200);
    expect(put.body).toMatchObject({
      name: 'entered_free_trial',
      description: 'Trials',
      tags: ['kept'],
      verified: true,
      verified_by: { id: account.userId },
      post_to_slack: false,
    });
    expect((await call(api.baseUrl, 'GET', url, { key: account.apiKey })).body).toMatchObject({
      description: 'Trials',
      post_to_slack: false,
    });
    const both = await call(api.baseUrl, 'PUT', url, { key: account.apiKey, body: { verified: true, hidden: true } });
    expect(both.status).toBe(400);
    expect(both.body).toEqual({
      type: 'validation_error',
      code: 'invalid_input',
      detail: 'An event cannot be both hidden and verified',
      attr: null,
    });
    const readOnly = await createKey(api.orm, account.userId, { scopes: ['event_definition:read'] });
    expect((await call(api.baseUrl, 'PUT', url, { key: readOnly, body: {} })).status).toBe(403);
  });

  it('needs the write scope to update', async () => {
    const def = await byName('purchase');
    const readOnly = await createKey(api.orm, account.userId, { scopes: ['event_definition:read'] });
    const res = await call(api.baseUrl, 'PATCH', `${P()}/${def.id}/`, { key: readOnly, body: { description: 'x' } });
    expect(res.status).toBe(403);
    expect(res.body.detail).toBe("API key missing required scope 'event_definition:write'");
  });

  it('counts API reads in metrics', async () => {
    const def = await byName('watched_movie');
    const before = (await call(api.baseUrl, 'GET', `${P()}/${def.id}/metrics/`, { key: account.apiKey })).body
      .query_usage_30_day;
    await call(api.baseUrl, 'GET', `${P()}/${def.id}/`, { key: account.apiKey });
    await call(api.baseUrl, 'GET', `${P()}/?search=watched`, { key: account.apiKey });
    const after = (await call(api.baseUrl, 'GET', `${P()}/${def.id}/metrics/`, { key: account.apiKey })).body
      .query_usage_30_day;
    expect(after).toBe(before + 2);
  });

  it('deletes the definition only; its events stay, and a later event recreates it', async () => {
    await capture(api.baseUrl, account.projectToken, [{ event: 'doomed', distinct_id: 'x' }]);
    const def = await byName('doomed');
    expect((await call(api.baseUrl, 'DELETE', `${P()}/${def.id}/`, { key: account.apiKey })).status).toBe(204);
    expect((await call(api.baseUrl, 'GET', `${P()}/${def.id}/`, { key: account.apiKey })).status).toBe(404);
    const [events] = await sql(
      api.orm,
      `select count(*)::int as n from event where project_id = ? and event = 'doomed'`,
      [account.projectId],
    );
    expect(events.n).toBe(1);
    const [entry] = await sql(
      api.orm,
      `select activity, detail from activity_log where scope = 'EventDefinition' and item_id = ?`,
      [def.id],
    );
    expect(entry).toMatchObject({ activity: 'deleted', detail: { name: 'doomed' } });
    await capture(api.baseUrl, account.projectToken, [{ event: 'doomed', distinct_id: 'x' }]);
    expect((await byName('doomed')).id).not.toBe(def.id);
  });
});
