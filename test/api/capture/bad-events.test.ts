// One bad event in a batch never fails the batch: it is repaired (timestamps, lone surrogates) or
// dropped (nested too deep) as PostHog's capture does, with an ingestion warning; the rest is stored,
// and the answer is 200.
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { eventsOf, requestOf } from '../../../api/capture/events.ts';
import { sql } from '../../db.ts';
import { apiWithAccount } from '../../helpers.ts';

const { api, account } = await apiWithAccount();

async function sendBatch(events: unknown[], extra: Record<string, unknown> = {}) {
  const body =
    typeof events === 'string' ? events : JSON.stringify({ api_key: account.projectToken, batch: events, ...extra });
  const res = await fetch(`${api.baseUrl}/batch/`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body,
  });
  return { status: res.status, body: await res.json() };
}
const stored = (event: string) =>
  sql(
    api.orm,
    `select distinct_id, properties, timestamp from event where project_id = ? and event = ? order by timestamp`,
    [account.projectId, event],
  );
const good = (event: string) => ({ event, distinct_id: 'good-user', properties: { ok: true } });
const EPOCH = new Date(0).getTime();

describe('timestamps PostgreSQL cannot store', () => {
  it('year 0, a negative year and year 10000 fall back as in PostHog; the batch is stored', async () => {
    const res = await sendBatch([
      good('ts-good'),
      { event: 'ts-year-0', distinct_id: 'u', timestamp: '0000-06-01T00:00:00Z' },
      { event: 'ts-negative-year', distinct_id: 'u', timestamp: '-000050-01-01T00:00:00Z' },
      { event: 'ts-year-10000', distinct_id: 'u', timestamp: '+010000-01-01T00:00:00Z' },
    ]);
    expect(res).toEqual({ status: 200, body: { status: 1 } });
    expect(await stored('ts-good')).toHaveLength(1);
    // Before year 1: the Unix epoch (PostHog's out-of-bounds fallback).
    expect(new Date((await stored('ts-year-0'))[0].timestamp).getTime()).toBe(EPOCH);
    expect(new Date((await stored('ts-negative-year'))[0].timestamp).getTime()).toBe(EPOCH);
    // More than 23 hours ahead: the server's time.
    expect(Math.abs(new Date((await stored('ts-year-10000'))[0].timestamp).getTime() - Date.now())).toBeLessThan(
      60_000,
    );
  });

  it('a huge offset, either way, and a sent_at that skews the timestamp out of range', async () => {
    const res = await sendBatch(
      [
        good('offset-good'),
        { event: 'offset-past', distinct_id: 'u', offset: 1e15 },
        { event: 'offset-far-past', distinct_id: 'u', offset: 1e300 },
        { event: 'offset-future', distinct_id: 'u', offset: -1e15 },
        { event: 'skewed-out', distinct_id: 'u', timestamp: '2026-01-01T00:00:00Z' },
      ],
      { sent_at: '+200000-01-01T00:00:00Z' },
    );
    expect(res).toEqual({ status: 200, body: { status: 1 } });
    expect(await stored('offset-good')).toHaveLength(1);
    expect(new Date((await stored('offset-past'))[0].timestamp).getTime()).toBe(EPOCH);
    expect(new Date((await stored('offset-far-past'))[0].timestamp).getTime()).toBe(EPOCH);
    expect(Math.abs(new Date((await stored('offset-future'))[0].timestamp).getTime() - Date.now())).toBeLessThan(
      60_000,
    );
    expect(new Date((await stored('skewed-out'))[0].timestamp).getTime()).toBe(EPOCH);
  });
});

describe('properties nested too deep', () => {
  it('drop that event only; the rest of the batch is stored', async () => {
    const deep = `${'{"a":'.repeat(10_000)}1${'}'.repeat(10_000)}`;
    const body =
      `{"api_key":${JSON.stringify(account.projectToken)},"batch":[${JSON.stringify(good('deep-good'))},` +
      `{"event":"deep-bad","distinct_id":"u","properties":${deep}},{"event":"deep-set","distinct_id":"u","$set":${deep}}]}`;
    const res = await sendBatch(body as unknown as unknown[]);
    expect(res).toEqual({ status: 200, body: { status: 1 } });
    expect(await stored('deep-good')).toHaveLength(1);
    expect(await stored('deep-bad')).toHaveLength(0);
    expect(await stored('deep-set')).toHaveLength(0);
  });

  it('keeps an event nested as deep as PostHog accepts (100 levels)', async () => {
    let properties: Record<string, unknown> = { leaf: true };
    for (let i = 0; i < 100; i++) properties = { a: properties };
    expect((await sendBatch([{ event: 'deep-ok', distinct_id: 'u', properties }])).status).toBe(200);
    expect(await stored('deep-ok')).toHaveLength(1);
  });
});

describe('lone surrogates (PostgreSQL jsonb refuses them)', () => {
  it('in a distinct id become U+FFFD', async () => {
    const res = await sendBatch([
      good('sur-good'),
      { event: 'sur-distinct', distinct_id: 'user-\ud800-x', properties: {} },
    ]);
    expect(res).toEqual({ status: 200, body: { status: 1 } });
    expect(await stored('sur-good')).toHaveLength(1);
    expect((await stored('sur-distinct'))[0].distinct_id).toBe('user-\ufffd-x');
    const [person] = await sql(
      api.orm,
      `select distinct_id from person_distinct_id where project_id = ? and distinct_id like 'user-%-x'`,
      [account.projectId],
    );
    expect(person.distinct_id).toBe('user-\ufffd-x');
  });

  it('in property keys and values, $set and the event name become U+FFFD; valid pairs are kept', async () => {
    const res = await sendBatch([
      good('sur-good-2'),
      {
        event: 'sur-props',
        distinct_id: 'sur-person',
        properties: {
          'k\udc00': 'v\ud83d',
          pair: '\ud83d\ude00',
          nested: [{ 'x\ud800': '\udfff' }],
          $set: { 'name\ud800': 'a\udc00' },
        },
      },
      { event: 'sur-name-\ud800', distinct_id: 'u' },
    ]);
    expect(res).toEqual({ status: 200, body: { status: 1 } });
    const [row] = await stored('sur-props');
    expect(row.properties).toMatchObject({ 'k\ufffd': 'v\ufffd', pair: '😀', nested: [{ 'x\ufffd': '\ufffd' }] });
    expect(await stored('sur-name-\ufffd')).toHaveLength(1);
    const [person] = await sql(
      api.orm,
      `select p.properties from person p join person_distinct_id d on d.person_id = p.id where d.project_id = ? and d.distinct_id = 'sur-person'`,
      [account.projectId],
    );
    expect(person.properties['name\ufffd']).toBe('a\ufffd');
  });

  it('a long distinct id is cut to 200 characters without splitting a surrogate pair', async () => {
    const id = `${'x'.repeat(199)}😀tail`;
    expect((await sendBatch([{ event: 'sur-cut', distinct_id: id }])).status).toBe(200);
    expect((await stored('sur-cut'))[0].distinct_id).toBe(`${'x'.repeat(199)}😀`);
  });
});

describe('an alias over 400 characters', () => {
  it('is no merge; the event is kept and so is the rest of the batch', async () => {
    const user = `alias-user-${randomUUID()}`;
    const alias = 'a'.repeat(500);
    const res = await sendBatch([
      good('alias-good'),
      { event: '$create_alias', distinct_id: user, properties: { alias } },
      { event: '$identify', distinct_id: user, properties: { $anon_distinct_id: 'b'.repeat(401) } },
    ]);
    expect(res).toEqual({ status: 200, body: { status: 1 } });
    expect(await stored('alias-good')).toHaveLength(1);
    expect(await stored('$create_alias')).toHaveLength(1);
    const ids = await sql(
      api.orm,
      `select d2.distinct_id from person_distinct_id d join person_distinct_id d2 on d2.person_id = d.person_id where d.project_id = ? and d.distinct_id = ?`,
      [account.projectId, user],
    );
    expect(ids.map((r) => r.distinct_id)).toEqual([user]);
  });
});

describe('the reasons, as ingestion warnings', () => {
  it('name each dropped event and each replaced timestamp with its uuid and distinct id', () => {
    const deep = JSON.parse(`${'{"a":'.repeat(200)}1${'}'.repeat(200)}`);
    const [first, second] = [randomUUID(), randomUUID()];
    const request = requestOf(
      {
        api_key: 'phc_x',
        batch: [
          { event: 'a', distinct_id: 'u', uuid: first, timestamp: '0000-01-01T00:00:00Z' },
          { event: 'b', distinct_id: 'v', uuid: second, properties: deep },
        ],
      },
      { engagePath: false },
    );
    const { events, warnings } = eventsOf(request, {});
    expect(events.map((e) => e.event)).toEqual(['a']);
    expect(warnings).toEqual([
      {
        type: 'ignored_invalid_timestamp',
        eventUuid: first,
        distinctId: 'u',
        details: {
          timestamp: '0000-01-01T00:00:00Z',
          sentAt: null,
          offset: null,
          result: '1970-01-01T00:00:00.000Z',
          reason: 'before year 1 or after 9999',
        },
      },
      {
        type: 'event_dropped_too_deep',
        eventUuid: second,
        distinctId: 'v',
        details: { eventName: 'b', reason: 'nested more than 128 levels deep; the event is not stored' },
      },
    ]);
  });
});
