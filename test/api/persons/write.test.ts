import { describe, expect, it } from 'vitest';
import { sql } from '../../db.ts';
import { capture } from '../../fixtures.ts';
import { apiWithAccount, call, createAccount } from '../../helpers.ts';

const { api, account } = await apiWithAccount();
const P = () => `/api/projects/${account.projectId}/persons`;

async function newPerson(distinctId: string, properties: Record<string, unknown> = {}) {
  await capture(api.baseUrl, account.projectToken, [
    { event: 'seed', distinct_id: distinctId, properties: { $set: properties } },
  ]);
  const res = await call(api.baseUrl, 'GET', `${P()}/?distinct_id=${distinctId}`, { key: account.apiKey });
  const uuid = res.body.results[0].uuid;
  return (await call(api.baseUrl, 'GET', `${P()}/${uuid}/`, { key: account.apiKey })).body;
}
const activities = async (id: number) =>
  (await call(api.baseUrl, 'GET', `${P()}/${id}/activity/`, { key: account.apiKey })).body.results;

describe('property changes', () => {
  it('PATCH sets properties synchronously, records a $set event and an activity entry', async () => {
    const person = await newPerson('w1', { keep: 1, plan: 'free' });
    const res = await call(api.baseUrl, 'PATCH', `${P()}/${person.id}/`, {
      key: account.apiKey,
      body: { properties: { plan: 'pro' } },
    });
    expect(res.status).toBe(200);
    expect(res.body.properties).toMatchObject({ keep: 1, plan: 'pro' });
    const events = await sql(
      api.orm,
      `select event, distinct_id, properties from event where project_id = ? and event = '$set'`,
      [account.projectId],
    );
    expect(events).toEqual([{ event: '$set', distinct_id: 'w1', properties: { $set: { plan: 'pro' } } }]);
    const [entry] = await activities(person.id);
    expect(entry).toMatchObject({
      activity: 'updated',
      scope: 'Person',
      item_id: String(person.id),
      detail: { changes: [{ type: 'Person', action: 'changed', field: 'properties', before: null, after: null }] },
    });
  });

  it('PATCH without properties answers PostHog’s hand-built 400', async () => {
    const person = await newPerson('w2');
    const res = await call(api.baseUrl, 'PATCH', `${P()}/${person.id}/`, { key: account.apiKey, body: { name: 'x' } });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({
      type: 'validation_error',
      code: 'This field is required.',
      detail: 'required',
      attr: 'properties',
    });
  });

  it('PUT is the same update as PATCH (PostHog serves both with one method): a $set merge, properties required', async () => {
    const person = await newPerson('w-put', { keep: 1, plan: 'free' });
    const url = `${P()}/${person.uuid}/`;
    const res = await call(api.baseUrl, 'PUT', url, { key: account.apiKey, body: { properties: { plan: 'team' } } });
    expect(res.status).toBe(200);
    expect(res.body.properties).toMatchObject({ keep: 1, plan: 'team' });
    const events = await sql(
      api.orm,
      `select properties from event where project_id = ? and event = '$set' and distinct_id = 'w-put'`,
      [account.projectId],
    );
    expect(events).toEqual([{ properties: { $set: { plan: 'team' } } }]);
    expect((await activities(person.id))[0]).toMatchObject({ activity: 'updated', scope: 'Person' });
    const missing = await call(api.baseUrl, 'PUT', url, { key: account.apiKey, body: { name: 'x' } });
    expect(missing.status).toBe(400);
    expect(missing.body).toEqual({
      type: 'validation_error',
      code: 'This field is required.',
      detail: 'required',
      attr: 'properties',
    });
    const csv = await call(api.baseUrl, 'PUT', `${url}?format=csv`, {
      key: account.apiKey,
      body: { properties: { plan: 'pro' } },
    });
    expect(csv.headers.get('content-type')).toMatch(/^text\/csv/);
  });

  it('update_property sets one key (null allowed) and checks value before key', async () => {
    const person = await newPerson('w3');
    const ok = await call(api.baseUrl, 'POST', `${P()}/${person.uuid}/update_property/`, {
      key: account.apiKey,
      body: { key: 'tier', value: null },
    });
    expect(ok.status).toBe(200);
    expect(ok.body.properties).toHaveProperty('tier', null);
    expect(
      (await call(api.baseUrl, 'POST', `${P()}/${person.id}/update_property/`, { key: account.apiKey, body: {} })).body
        .attr,
    ).toBe('value');
    expect(
      (
        await call(api.baseUrl, 'POST', `${P()}/${person.id}/update_property/`, {
          key: account.apiKey,
          body: { value: 1 },
        })
      ).body.attr,
    ).toBe('key');
  });

  it('delete_property removes the key and records $delete_person_property with $unset', async () => {
    const person = await newPerson('w4', { secret: 'x', other: 1 });
    const res = await call(api.baseUrl, 'POST', `${P()}/${person.id}/delete_property/`, {
      key: account.apiKey,
      body: { $unset: 'secret' },
    });
    expect(res.status).toBe(200);
    expect(res.body.success).toBe(true);
    expect(res.body.properties).not.toHaveProperty('secret');
    const [event] = await sql(
      api.orm,
      `select properties from event where project_id = ? and event = '$delete_person_property'`,
      [account.projectId],
    );
    expect(event.properties).toEqual({ $unset: ['secret'] });
    expect((await activities(person.id))[0]).toMatchObject({
      activity: 'delete_property',
      detail: { name: person.uuid },
    });
    const missing = await call(api.baseUrl, 'POST', `${P()}/${person.id}/delete_property/`, {
      key: account.apiKey,
      body: {},
    });
    expect(missing.status).toBe(400);
    expect(missing.body.attr).toBe('$unset');
  });
});

describe('split', () => {
  it('moves distinct ids to new persons with deterministic uuids and keeps properties on the original', async () => {
    await capture(api.baseUrl, account.projectToken, [
      { event: 'e', distinct_id: 's-main', properties: { $set: { kept: true } } },
      { event: 'e', distinct_id: 's-a' },
      { event: '$merge_dangerously', distinct_id: 's-main', properties: { alias: 's-a' } },
      { event: '$create_alias', distinct_id: 's-main', properties: { alias: 's-b' } },
    ]);
    const uuid = (await call(api.baseUrl, 'GET', `${P()}/?distinct_id=s-main`, { key: account.apiKey })).body.results[0]
      .uuid;
    const person = (await call(api.baseUrl, 'GET', `${P()}/${uuid}/`, { key: account.apiKey })).body;
    expect(person.distinct_ids.sort()).toEqual(['s-a', 's-b', 's-main']);

    const bad = await call(api.baseUrl, 'POST', `${P()}/${person.id}/split/`, {
      key: account.apiKey,
      body: { distinct_ids_to_split: ['nope'] },
    });
    expect(bad.status).toBe(400);
    expect(bad.body.detail).toContain('nope');
    for (const [body, detail] of [
      [{ distinct_ids_to_split: [] }, 'must not be empty'],
      [{ distinct_ids_to_split: 'x' }, 'must be a list of strings'],
      [
        { distinct_ids_to_split: ['s-a'], main_distinct_id: 's-main' },
        'main_distinct_id cannot be combined with distinct_ids_to_split',
      ],
    ] as const) {
      const res = await call(api.baseUrl, 'POST', `${P()}/${person.id}/split/`, { key: account.apiKey, body });
      expect(res.status).toBe(400);
      expect(res.body.detail).toBe(detail);
    }

    const res = await call(api.baseUrl, 'POST', `${P()}/${person.id}/split/`, {
      key: account.apiKey,
      body: { main_distinct_id: 's-main' },
    });
    expect(res.status).toBe(200);
    expect(res.body.success).toBe(true);
    const after = (await call(api.baseUrl, 'GET', `${P()}/${person.id}/`, { key: account.apiKey })).body;
    expect(after.distinct_ids).toEqual(['s-main']);
    expect(after.properties.kept).toBe(true);
    const moved = (await call(api.baseUrl, 'GET', `${P()}/?distinct_id=s-a`, { key: account.apiKey })).body.results[0];
    expect(moved.distinct_ids).toEqual(['s-a']);
    expect((await activities(person.id))[0]).toMatchObject({
      activity: 'split_person',
      detail: { changes: [{ action: 'split' }] },
    });
  });
});

describe('deletion', () => {
  const requests = async () =>
    sql(
      api.orm,
      `select deletion_type, mode, key, status, distinct_ids from async_deletion where project_id = ? order by id`,
      [account.projectId],
    );

  it('DELETE answers 204, removes the person from every read, keeps events, and records no request without delete_events', async () => {
    const person = await newPerson('d1');
    const before = (await requests()).length;
    const res = await call(api.baseUrl, 'DELETE', `${P()}/${person.id}/`, { key: account.apiKey });
    expect(res.status).toBe(204);
    expect(res.text).toBe('');
    expect((await call(api.baseUrl, 'GET', `${P()}/${person.id}/`, { key: account.apiKey })).status).toBe(404);
    expect((await call(api.baseUrl, 'DELETE', `${P()}/${person.id}/`, { key: account.apiKey })).status).toBe(404);
    expect((await requests()).length).toBe(before);
    const [events] = await sql(
      api.orm,
      `select count(*)::int as n from event where project_id = ? and distinct_id = 'd1'`,
      [account.projectId],
    );
    expect(events.n).toBe(1);
    const all = (await call(api.baseUrl, 'GET', `${P()}/activity/`, { key: account.apiKey })).body.results;
    expect(all.some((a: any) => a.activity === 'deleted' && a.item_id === String(person.id))).toBe(true);
  });

  it('delete_events=true records a weekly event-deletion request; re-requesting is a no-op', async () => {
    const person = await newPerson('d2');
    await call(api.baseUrl, 'DELETE', `${P()}/${person.id}/?delete_events=true`, { key: account.apiKey });
    const rows = (await requests()).filter((r) => r.key === person.uuid);
    expect(rows).toEqual([
      { deletion_type: 'person_events', mode: 'weekly', key: person.uuid, status: 'pending', distinct_ids: ['d2'] },
    ]);
  });

  it('delete_events (off-peak) and delete_recordings (immediate) keep the person and return trackable requests', async () => {
    const person = await newPerson('d3');
    const events = await call(api.baseUrl, 'POST', `${P()}/${person.id}/delete_events/`, { key: account.apiKey });
    expect(events.status).toBe(200);
    expect(events.body.deletion_requests).toMatchObject([
      { person_uuid: person.uuid, deletion_type: 'person_events', mode: 'off_peak', status: 'pending' },
    ]);
    const again = await call(api.baseUrl, 'POST', `${P()}/${person.id}/delete_events/`, { key: account.apiKey });
    expect(again.body.deletion_requests[0].id).toBe(events.body.deletion_requests[0].id);
    const recordings = await call(api.baseUrl, 'POST', `${P()}/${person.id}/delete_recordings/`, {
      key: account.apiKey,
    });
    expect(recordings.body.deletion_requests).toMatchObject([
      { deletion_type: 'person_recordings', mode: 'immediate' },
    ]);
    expect((await call(api.baseUrl, 'GET', `${P()}/${person.id}/`, { key: account.apiKey })).status).toBe(200);

    const status = await call(api.baseUrl, 'GET', `${P()}/deletion_status/?person_uuid=${person.uuid}`, {
      key: account.apiKey,
    });
    expect(status.body.count).toBe(2);
    expect(status.body.results.every((r: any) => r.status === 'pending' && r.delete_verified_at === null)).toBe(true);
    expect(
      (
        await call(api.baseUrl, 'GET', `${P()}/deletion_status/?status=completed&person_uuid=${person.uuid}`, {
          key: account.apiKey,
        })
      ).body.count,
    ).toBe(0);
    expect(
      (await call(api.baseUrl, 'GET', `${P()}/deletion_status/?status=bogus`, { key: account.apiKey })).status,
    ).toBe(400);
    expect(
      (await call(api.baseUrl, 'GET', `${P()}/deletion_status/?person_uuid=nope`, { key: account.apiKey })).status,
    ).toBe(400);
  });

  it('bulk_delete validates, resolves ids and distinct ids, and answers with counts and requests', async () => {
    for (const [body, detail] of [
      [{ ids: [] }, 'You need to specify either distinct_ids or ids'],
      [{ ids: Array.from({ length: 1001 }, (_, i) => String(i)) }, 'You can only pass 1000 ids in one call'],
      [
        { distinct_ids: Array.from({ length: 1001 }, (_, i) => `x${i}`) },
        'You can only pass 1000 distinct_ids in one call',
      ],
    ] as const) {
      const res = await call(api.baseUrl, 'POST', `${P()}/bulk_delete/`, { key: account.apiKey, body });
      expect(res.status).toBe(400);
      expect(res.body.detail).toBe(detail);
    }
    const a = await newPerson('b1');
    const b = await newPerson('b2');
    await newPerson('b3');
    const other = await createAccount(api.orm);
    await capture(api.baseUrl, other.projectToken, [{ event: 'e', distinct_id: 'b3' }]);

    const byIds = await call(api.baseUrl, 'POST', `${P()}/bulk_delete/`, {
      key: account.apiKey,
      body: { ids: [a.uuid, String(b.id), '00000000-0000-0000-0000-000000000000'], delete_events: true },
    });
    expect(byIds.status).toBe(200);
    expect(byIds.body).toMatchObject({
      persons_found: 2,
      persons_deleted: 2,
      events_queued_for_deletion: true,
      recordings_queued_for_deletion: false,
      deletion_errors: [],
    });
    expect(byIds.body.deletion_requests).toHaveLength(2);
    expect((await call(api.baseUrl, 'GET', `${P()}/${a.id}/`, { key: account.apiKey })).status).toBe(404);

    const byDistinct = await call(api.baseUrl, 'POST', `${P()}/bulk_delete/`, {
      key: account.apiKey,
      body: { distinct_ids: ['b3'] },
    });
    expect(byDistinct.body).toMatchObject({
      persons_found: 1,
      persons_deleted: 1,
      events_queued_for_deletion: false,
      deletion_requests: [],
    });
    const [otherPerson] = await sql(api.orm, `select count(*)::int as n from person where project_id = ?`, [
      other.projectId,
    ]);
    expect(otherPerson.n).toBe(1); // the other project's "b3" is untouched

    const none = await call(api.baseUrl, 'POST', `${P()}/bulk_delete/`, {
      key: account.apiKey,
      body: { distinct_ids: ['nobody'], delete_events: true },
    });
    expect(none.body).toMatchObject({ persons_found: 0, persons_deleted: 0, events_queued_for_deletion: false });
  });
});
