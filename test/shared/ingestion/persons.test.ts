// Person rules during ingestion (PostHog's plugin server, ingestion/persons), through the real capture endpoint.
import { describe, expect, it } from 'vitest';
import { personUuidFor } from '../../../shared/persons/person-uuid.ts';
import { personsOf, sql } from '../../db.ts';
import { apiWithAccount } from '../../helpers.ts';

const { api, account } = await apiWithAccount();

async function capture(...events: Record<string, unknown>[]) {
  const res = await fetch(`${api.baseUrl}/batch/`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ api_key: account.projectToken, batch: events.map((e) => ({ properties: {}, ...e })) }),
  });
  expect(res.status).toBe(200);
}
const personOf = async (distinctId: string) =>
  (await personsOf(api.orm, account.projectId)).find((p) => p.distinct_ids.includes(distinctId));

describe('property updates', () => {
  it('applies $set_once, then $set, then $unset, and adds $initial_ properties', async () => {
    await capture({
      event: 'e',
      distinct_id: 'p1',
      properties: { $set: { a: 1, b: 1 }, $set_once: { c: 1 }, $browser: 'Firefox', utm_source: 'news' },
    });
    await capture({
      event: 'e',
      distinct_id: 'p1',
      properties: { $set_once: { a: 2, c: 2, d: null }, $set: { b: 2 }, $unset: ['a'], $browser: 'Chrome' },
    });
    const person = await personOf('p1');
    expect(person!.properties).toMatchObject({
      b: 2,
      c: 1,
      d: null,
      $browser: 'Chrome',
      $initial_browser: 'Firefox',
      utm_source: 'news',
      $initial_utm_source: 'news',
    });
    expect(person!.properties).not.toHaveProperty('a');
  });

  it('keeps a stored null under $set_once, and $unset accepts an object', async () => {
    await capture({ event: 'e', distinct_id: 'p2', properties: { $set: { k: null, gone: 1 } } });
    await capture({ event: 'e', distinct_id: 'p2', properties: { $set_once: { k: 'x' }, $unset: { gone: true } } });
    const person = await personOf('p2');
    expect(person!.properties.k).toBeNull();
    expect(person!.properties).not.toHaveProperty('gone');
  });

  it('creates no person for $process_person_profile: false, but records the deterministic uuid', async () => {
    await capture({
      event: 'personless',
      distinct_id: 'ghost',
      properties: { $process_person_profile: false, $set: { a: 1 } },
    });
    expect(await personOf('ghost')).toBeUndefined();
    const [row] = await sql(api.orm, `select person_id from event where project_id = ? and event = 'personless'`, [
      account.projectId,
    ]);
    expect(row.person_id).toBe(personUuidFor(account.projectId, 'ghost'));
  });
});

describe('merges', () => {
  it('$identify with $anon_distinct_id attaches the identified id to the anonymous person', async () => {
    await capture({ event: 'pageview', distinct_id: 'anon-a', properties: { $set: { from: 'anon' } } });
    const anon = await personOf('anon-a');
    await capture({
      event: '$identify',
      distinct_id: 'user-a',
      properties: { $anon_distinct_id: 'anon-a', $set: { email: 'a@x.com' } },
    });
    const person = await personOf('user-a');
    expect(person!.uuid).toBe(anon!.uuid);
    expect(person!.distinct_ids).toEqual(['anon-a', 'user-a']);
    expect(person!.is_identified).toBe(true);
    expect(person!.properties).toMatchObject({ from: 'anon', email: 'a@x.com' });
  });

  it('merges two anonymous persons, target properties winning, and refuses to merge an identified one', async () => {
    await capture({ event: 'e', distinct_id: 'm-target', properties: { $set: { shared: 'target', t: 1 } } });
    await capture({ event: 'e', distinct_id: 'm-other', properties: { $set: { shared: 'other', o: 1 } } });
    await capture({ event: '$create_alias', distinct_id: 'm-target', properties: { alias: 'm-other' } });
    const merged = await personOf('m-target');
    expect(merged!.distinct_ids).toEqual(['m-other', 'm-target']);
    expect(merged!.properties).toMatchObject({ shared: 'target', t: 1, o: 1 });
    expect(merged!.is_identified).toBe(true);

    await capture({ event: 'e', distinct_id: 'lonely' });
    await capture({ event: '$create_alias', distinct_id: 'lonely', properties: { alias: 'm-target' } }); // m-target's person is identified
    expect((await personOf('lonely'))!.distinct_ids).toEqual(['lonely']);
    await capture({ event: '$merge_dangerously', distinct_id: 'lonely', properties: { alias: 'm-target' } });
    expect((await personOf('lonely'))!.distinct_ids).toEqual(['lonely', 'm-other', 'm-target']);
  });

  it('never merges on an illegal distinct id', async () => {
    await capture({ event: 'e', distinct_id: 'legit' });
    for (const illegal of ['anonymous', 'null', '"undefined"', ' ']) {
      await capture({ event: '$identify', distinct_id: 'legit', properties: { $anon_distinct_id: illegal } });
    }
    expect((await personOf('legit'))!.distinct_ids).toEqual(['legit']);
  });
});

describe('concurrency', () => {
  it('creates exactly one person for 20 concurrent requests about one new distinct id, keeping every $set', async () => {
    await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        capture({ event: 'burst', distinct_id: 'racer', properties: { $set: { [`k${i}`]: i } } }),
      ),
    );
    const persons = (await personsOf(api.orm, account.projectId)).filter((p) => p.distinct_ids.includes('racer'));
    expect(persons).toHaveLength(1);
    for (let i = 0; i < 20; i++) expect(persons[0].properties[`k${i}`]).toBe(i);
    const [orphans] = await sql(
      api.orm,
      `select count(*)::int as n from person p where project_id = ? and not exists (select 1 from person_distinct_id d where d.person_id = p.id)`,
      [account.projectId],
    );
    expect(orphans.n).toBe(0);
  });

  it('gives an event to the person that took its distinct id while the request created its own, leaving no orphan', async () => {
    await capture({ event: 'e', distinct_id: 'claimant' });
    const claimant = (await personOf('claimant'))!;
    // Another transaction links 'contested' to the existing person and holds it uncommitted: the
    // request finds no person for it, creates one, then waits on the distinct id's unique key.
    let commit!: () => void;
    const held = new Promise<void>((resolve) => (commit = resolve));
    let linked!: () => void;
    const linking = new Promise<void>((resolve) => (linked = resolve));
    const other = api.orm.em.fork().transactional(async (tx) => {
      await tx
        .getConnection()
        .execute(
          `insert into person_distinct_id (project_id, person_id, distinct_id) select project_id, id, 'contested' from person where uuid = ?`,
          [claimant.uuid],
          'run',
          tx.getTransactionContext(),
        );
      linked();
      await held;
    });
    await linking;
    const request = capture({
      event: 'contested-event',
      distinct_id: 'contested',
      properties: { $set: { seen: true } },
    });
    // Commit only once the request waits on the held distinct id's lock (seen in pg_stat_activity).
    for (let waiting = 0; waiting === 0; await new Promise((r) => setTimeout(r, 10))) {
      [{ waiting }] = await sql(
        api.orm,
        `select count(*)::int as waiting from pg_stat_activity
          where datname = current_database() and wait_event_type = 'Lock' and query ilike '%person_distinct_id%'`,
      );
    }
    commit();
    await other;
    await request;

    const person = (await personOf('contested'))!;
    expect(person.uuid).toBe(claimant.uuid);
    expect(person.properties.seen).toBe(true);
    const [event] = await sql(
      api.orm,
      `select person_id from event where project_id = ? and event = 'contested-event'`,
      [account.projectId],
    );
    expect(event.person_id).toBe(claimant.uuid);
    const [own] = await sql(api.orm, `select count(*)::int as n from person where project_id = ? and uuid = ?`, [
      account.projectId,
      personUuidFor(account.projectId, 'contested'),
    ]);
    expect(own.n).toBe(0); // the person the request created for it was removed
  });

  it('handles concurrent identifies of overlapping ids without deadlocking or duplicating', async () => {
    await Promise.all(
      Array.from({ length: 10 }, (_, i) =>
        capture(
          { event: 'e', distinct_id: `c-anon-${i % 3}` },
          { event: '$identify', distinct_id: `c-user-${i % 2}`, properties: { $anon_distinct_id: `c-anon-${i % 3}` } },
        ),
      ),
    );
    const ids = await sql(
      api.orm,
      `select distinct_id, count(*)::int as n from person_distinct_id where project_id = ? and distinct_id like 'c-%' group by distinct_id`,
      [account.projectId],
    );
    expect(ids.every((r) => r.n === 1)).toBe(true);
    expect(ids).toHaveLength(5);
  });
});
