// Person rules inside one request: a batch carries many events of one distinct id, and merges in its
// middle. The outcome must be that of processing the events one by one, in order (PostHog's rules):
// $set last writer wins, $set_once first wins, $unset removes, the person is created by its first
// event, a merge moves the later events of both ids to one person.
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { personUuidFor } from '../../../shared/persons/person-uuid.ts';
import { personsOf, sql } from '../../db.ts';
import { apiWithAccount } from '../../helpers.ts';

const { api, account } = await apiWithAccount();

type Event = {
  event: string;
  distinct_id: string;
  uuid: string;
  timestamp?: string;
  properties: Record<string, unknown>;
};
const ev = (distinctId: string, properties: Record<string, unknown> = {}, extra: Partial<Event> = {}): Event => ({
  event: 'e',
  distinct_id: distinctId,
  uuid: randomUUID(),
  properties,
  ...extra,
});

async function capture(...events: Event[]) {
  const res = await fetch(`${api.baseUrl}/batch/`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ api_key: account.projectToken, batch: events }),
  });
  expect(res.status).toBe(200);
}
const personOf = async (distinctId: string) =>
  (await personsOf(api.orm, account.projectId)).find((p) => p.distinct_ids.includes(distinctId));
async function personIdsOf(events: Event[]) {
  const rows = await sql<{ uuid: string; person_id: string }>(
    api.orm,
    `select uuid, person_id from event where project_id = ? and uuid in (?)`,
    [account.projectId, events.map((e) => e.uuid)],
  );
  const byUuid = new Map(rows.map((r) => [r.uuid, r.person_id]));
  return events.map((e) => byUuid.get(e.uuid));
}

/** One distinct id many times in a batch, $set / $set_once / $unset interleaved (and another id between). */
const interleaved = (id: string, other: string) => [
  ev(id, { $set_once: { a: 1 }, $set: { b: 1 }, $browser: 'Firefox' }, { timestamp: '2026-01-02T00:00:00Z' }),
  ev(id, { $set: { a: 2 }, $set_once: { b: 2, c: 2 }, $browser: 'Chrome' }, { timestamp: '2026-01-01T00:00:00Z' }),
  ev(other, { $set: { x: 1 } }),
  ev(id, { $unset: ['b'], $set_once: { b: 3 } }), // $set_once first (b is there), then $unset
  ev(id, { $set_once: { b: 4, c: 4 } }),
  ev(other, { $set_once: { x: 2 } }),
  ev(id, { $set: { d: 1 }, $unset: ['d'] }),
  ev(id, { $set: { e: { n: 1 } } }),
  ev(id, { $set: { e: { n: 2 } }, $set_once: { f: null } }),
  ev(id, { $set_once: { f: 'x' } }), // a stored null counts as present
];

describe('one distinct id many times in one batch', () => {
  it('creates the person on its first event and applies every update in event order', async () => {
    const events = interleaved('bo-new', 'bo-new-other');
    await capture(...events);
    const person = (await personOf('bo-new'))!;
    expect(person.uuid).toBe(personUuidFor(account.projectId, 'bo-new'));
    expect(person.properties).toEqual({
      a: 2,
      b: 4,
      c: 2,
      e: { n: 2 },
      f: null,
      $browser: 'Chrome',
      $initial_browser: 'Firefox',
      $creator_event_uuid: events[0].uuid,
    });
    expect(person.is_identified).toBe(false);
    expect(new Date(person.created_at).toISOString()).toBe('2026-01-02T00:00:00.000Z'); // the first event's, not the earliest
    const other = (await personOf('bo-new-other'))!;
    expect(other.properties).toEqual({ x: 1, $creator_event_uuid: events[2].uuid });
    expect(await personIdsOf(events)).toEqual(
      events.map((e) => (e.distinct_id === 'bo-new' ? person.uuid : other.uuid)),
    );
  });

  it('applies them in order to a person stored before', async () => {
    const first = ev('bo-old', { $set: { a: 0, b: 0, c: 0, f: 0 } });
    await capture(first);
    const events = interleaved('bo-old', 'bo-old-other');
    await capture(...events);
    const person = (await personOf('bo-old'))!;
    expect(person.properties).toEqual({
      a: 2,
      b: 4,
      c: 0,
      e: { n: 2 },
      f: 0,
      $browser: 'Chrome',
      $initial_browser: 'Firefox',
      $creator_event_uuid: first.uuid,
    });
    expect(await personIdsOf(events.filter((e) => e.distinct_id === 'bo-old'))).toEqual(
      Array(8).fill(personUuidFor(account.projectId, 'bo-old')),
    );
  });
});

describe('a merge in the middle of a batch', () => {
  it('$identify of a new id: later events of both ids go to the anonymous person', async () => {
    const events = [
      ev('mid-anon', { $set: { from: 'anon' }, $set_once: { first: 'anon' } }),
      ev('mid-user', { $set: { early: 'user' } }), // creates mid-user's own person
      ev(
        'mid-user',
        { $anon_distinct_id: 'mid-anon', $set: { email: 'm@x.com' }, $set_once: { first: 'user' } },
        {
          event: '$identify',
        },
      ),
      ev('mid-anon', { $set: { after: 'anon' } }),
      ev('mid-user', { $set: { after: 'user' }, $set_once: { first: 'late' } }),
      ev('mid-anon', { $unset: ['early'] }),
    ];
    await capture(...events);
    const persons = (await personsOf(api.orm, account.projectId)).filter((p) =>
      p.distinct_ids.some((d) => d.startsWith('mid-')),
    );
    expect(persons).toHaveLength(1);
    const [person] = persons;
    expect(person.distinct_ids).toEqual(['mid-anon', 'mid-user']);
    expect(person.is_identified).toBe(true);
    // Both ids had persons: mid-user's (the target) keeps its uuid and wins on shared keys.
    expect(person.uuid).toBe(personUuidFor(account.projectId, 'mid-user'));
    expect(person.properties).toEqual({
      from: 'anon',
      first: 'anon',
      email: 'm@x.com',
      after: 'user',
      $creator_event_uuid: events[1].uuid,
    });
    const anonUuid = personUuidFor(account.projectId, 'mid-anon');
    expect(await personIdsOf(events)).toEqual([
      anonUuid,
      person.uuid,
      person.uuid,
      person.uuid,
      person.uuid,
      person.uuid,
    ]);
  });

  it('$identify whose identified id is new: the anonymous person takes it, before and after', async () => {
    const events = [
      ev('solo-anon', { $set: { step: 1 } }),
      ev(
        'solo-user',
        { $anon_distinct_id: 'solo-anon', $set: { step: 2 }, $set_once: { signup: 'now' } },
        {
          event: '$identify',
        },
      ),
      ev('solo-user', { $set: { step: 3 } }),
      ev('solo-anon', { $set: { step: 4 }, $set_once: { signup: 'later' } }),
      ev('solo-new', { $set: { step: 5 } }),
    ];
    await capture(...events);
    const person = (await personOf('solo-user'))!;
    expect(person.distinct_ids).toEqual(['solo-anon', 'solo-user']);
    expect(person.is_identified).toBe(true);
    expect(person.uuid).toBe(personUuidFor(account.projectId, 'solo-anon'));
    expect(person.properties).toEqual({ step: 4, signup: 'now', $creator_event_uuid: events[0].uuid });
    const fresh = (await personOf('solo-new'))!;
    expect(fresh.properties).toEqual({ step: 5, $creator_event_uuid: events[4].uuid });
    expect(await personIdsOf(events)).toEqual([person.uuid, person.uuid, person.uuid, person.uuid, fresh.uuid]);
  });

  it('events that change nothing, before and after a merge: each goes to the person its id has at that point', async () => {
    // plain-b's person also holds plain-b2 (and is identified: only $merge_dangerously merges it).
    await capture(
      ev('plain-a', { $set: { a: 1 } }),
      ev('plain-b', { $set: { b: 1 } }),
      ev('plain-b2', { $anon_distinct_id: 'plain-b' }, { event: '$identify' }),
    );
    const before = (await personOf('plain-b2'))!;
    expect(before.distinct_ids).toEqual(['plain-b', 'plain-b2']);
    const events = [
      ev('plain-a'),
      ev('plain-b2'),
      ev('plain-a', { alias: 'plain-b' }, { event: '$merge_dangerously' }),
      ev('plain-b2'),
      ev('plain-b2', { $process_person_profile: false }),
      ev('plain-a', { $set: { c: 1 } }),
    ];
    await capture(...events);
    const person = (await personOf('plain-a'))!;
    expect(person.distinct_ids).toEqual(['plain-a', 'plain-b', 'plain-b2']);
    expect(person.properties).toMatchObject({ a: 1, b: 1, c: 1 });
    expect(await personIdsOf(events)).toEqual([
      person.uuid,
      before.uuid,
      person.uuid,
      person.uuid,
      person.uuid,
      person.uuid,
    ]);
  });
});
