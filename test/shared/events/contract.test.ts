// The event store contract: the same events and persons give the same answers from PostgreSQL and
// from ClickHouse (chDB, the real engine in-process) — funnels and drop-offs, persons merged after
// their events were stored, sub-second order and the window's edge, a deleted person, counts.
import { randomUUID } from 'node:crypto';
import type { EntityManager, MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../../shared/platform/config.ts';
import { initOrm } from '../../../shared/platform/db/orm.ts';
import { rows, run } from '../../../shared/platform/db/sql.ts';
import { chTime, createClickHouseEventStore, type ClickHouseEventStore } from '../../../shared/events/clickhouse.ts';
import { mirrorProjectDistinctIds } from '../../../shared/events/clickhouse-mirror.ts';
import {
  type EventRow,
  type EventStore,
  type ExperimentEventFilter,
  type ExperimentProperty,
  experimentNames,
  type FunnelParams,
} from '../../../shared/events/event-store.ts';
import {
  computeExperimentCounts,
  type ExperimentForResults,
  type ExperimentMetric,
} from '../../../shared/experiments/results.ts';
import type { MetricStats } from '../../../shared/experiments/stats.ts';
import { createPostgresEventStore } from '../../../shared/events/postgres.ts';
import { withPostgresSource } from '../../../shared/events/create.ts';
import { createAccount } from '../../helpers.ts';
import { chdbClient, chdbDatabase } from '../../clickhouse.ts';
import { insertPerson } from './persons.ts';

let orm: MikroORM;
let pg: EventStore;
let ch: ClickHouseEventStore;
/** The same data, an experiment's events read in parts of about 3 events. */
let chParts: ClickHouseEventStore;
let pgParts: EventStore;
let projectId: number;
let otherProjectId: number;
const em = () => orm.em.fork() as EntityManager;

const T0 = Date.parse('2026-03-02T00:00:00.000Z');
const at = (ms: number) => new Date(T0 + ms);
const H = 3_600_000;
const D = 24 * H;
const funnel: FunnelParams = {
  steps: ['signup', 'activate', 'pay'],
  from: new Date(T0 - D),
  to: new Date(T0 + 40 * D),
  windowDays: 14,
};

/** A person with these distinct ids (created a year ago, in this order, so later persons list first). */
const person = (project: number, ...distinctIds: string[]) => insertPerson(em(), project, distinctIds, 365);

const event = (project: number, name: string, distinctId: string, personUuid: string | null, t: Date): EventRow => ({
  uuid: randomUUID(),
  projectId: project,
  event: name,
  distinctId,
  personId: personUuid,
  properties: { $browser: 'Firefox' },
  timestamp: t,
});

/** Every chunk of a store's stream, in order. */
async function collect<T>(chunks: AsyncIterable<T[]>): Promise<T[]> {
  const all: T[] = [];
  for await (const chunk of chunks) all.push(...chunk);
  return all;
}

/**
 * An experiment read as one event a row (distinct id, name, time, exposure, the asked values: nulls
 * when the event carries none), in the order the store gave them.
 */
async function experimentRead(
  store: EventStore,
  projectId: number,
  filter: ExperimentEventFilter,
  properties: ExperimentProperty[],
) {
  const names = experimentNames(filter);
  const out: { distinctId: string; event: string; t: number; exposure: string | null; values: unknown[] }[] = [];
  const lists = await collect(store.experimentEvents(projectId, filter, properties));
  // Each distinct id comes once, with all its events (the fold takes a single-id person's list whole).
  const ids = lists.map((list) => list.distinctId);
  expect(new Set(ids).size).toBe(ids.length);
  for (const list of lists)
    list.t.forEach((t, j) => {
      const x = list.exposureAt.indexOf(j);
      const v = list.valuedAt.indexOf(j);
      out.push({
        distinctId: list.distinctId,
        event: names[list.name[j]],
        t,
        exposure: x < 0 ? null : list.exposure[x],
        values: v < 0 ? properties.map(() => null) : list.values[v],
      });
    });
  return out;
}

async function insertBoth(events: EventRow[]) {
  await pg.insert(events);
  await ch.insert(events);
}

/** Every step's and drop-off's persons, whole and one inner page, from one store. */
async function answers(store: EventStore, params = funnel) {
  const out: Record<string, unknown> = {};
  for (const step of [1, 2, 3, -2, -3]) {
    out[`all ${step}`] = await store.funnelPersonIds(projectId, params, step, { limit: 100, offset: 0 });
    out[`page ${step}`] = await store.funnelPersonIds(projectId, params, step, { limit: 2, offset: 1 });
  }
  return out;
}

async function sameAnswers(params = funnel) {
  const fromPg = await answers(pg, params);
  expect(await answers(ch, params)).toEqual(fromPg);
  return fromPg as Record<string, { count: number; personIds: string[] }>;
}

/** Every lifecycle bucket of a day (any event, and one event) in a time zone, from both stores: the same. */
async function sameLifecycle(day: Date, timezone = 'UTC') {
  const page = { limit: 100, offset: 0 };
  const of = async (store: EventStore) => {
    const out: Record<string, string[]> = {};
    for (const event of [null, 'signup'])
      for (const type of ['new', 'returning', 'resurrecting', 'dormant'] as const)
        out[`${event ?? 'any'} ${type}`] = (
          await store.lifecyclePersonIds(projectId, { day, type, event, timezone }, page)
        ).personIds;
    return out;
  };
  const fromPg = await of(pg);
  expect(await of(ch)).toEqual(fromPg);
  return fromPg;
}

/** A person's events up to `to` (at most `limit`), from both stores: the same. */
async function sameTimeline(personId: string, to = funnel.to, limit = 100) {
  const fromPg = await pg.personEvents(projectId, personId, to, limit);
  expect(await ch.personEvents(projectId, personId, to, limit)).toEqual(fromPg);
  return fromPg.map((e) => `${e.event}@${e.timestamp.getTime() - T0}`);
}

/** Funnel correlation's persons for an entity, converted and not, from both stores: the same. */
async function sameCorrelation(entity: string) {
  const page = { limit: 100, offset: 0 };
  const of = async (store: EventStore) => ({
    converted: await store.funnelCorrelationPersonIds(projectId, funnel, entity, true, page),
    dropped: await store.funnelCorrelationPersonIds(projectId, funnel, entity, false, page),
  });
  const fromPg = await of(pg);
  expect(await of(ch)).toEqual(fromPg);
  return { converted: fromPg.converted.personIds, dropped: fromPg.dropped.personIds };
}

let A: { id: string; uuid: string };
let B: typeof A;
let C: typeof A;
let D1: typeof A;
let D2: typeof A;
let E: typeof A;
let F: typeof A;
let G: typeof A;
let Hp: typeof A;
let X: typeof A;

beforeAll(async () => {
  const config = loadConfig();
  orm = await initOrm(config.databaseUrl);
  projectId = (await createAccount(orm)).projectId;
  otherProjectId = (await createAccount(orm)).projectId;
  pg = createPostgresEventStore(orm, { deleteChunk: 2 }); // small windows: several delete statements
  const database = chdbDatabase('contract');
  ch = createClickHouseEventStore(chdbClient(), database, orm);
  expect(await ch.migrate()).toEqual([
    '0001-events',
    '0002-person-distinct-id',
    '0003-events-retention',
    '0004-person-created-at',
  ]);
  expect(await ch.migrate()).toEqual([]);
  chParts = createClickHouseEventStore(chdbClient(), database, orm, { experimentPart: 3 });
  pgParts = createPostgresEventStore(orm, { deleteChunk: 2, experimentPart: 3 });

  A = await person(projectId, 'a');
  B = await person(projectId, 'b');
  C = await person(projectId, 'c1'); // will take the anonymous 'c-anon' by alias
  D1 = await person(projectId, 'd1');
  D2 = await person(projectId, 'd2'); // will be merged into D1
  E = await person(projectId, 'e');
  F = await person(projectId, 'f');
  G = await person(projectId, 'g');
  Hp = await person(projectId, 'h');
  X = await person(projectId, 'x'); // will be deleted
  const other = await person(otherProjectId, 'a');
  await insertBoth([
    event(projectId, 'signup', 'a', A.uuid, at(0)),
    event(projectId, 'activate', 'a', A.uuid, at(H)),
    event(projectId, 'pay', 'a', A.uuid, at(2 * H)),
    event(projectId, 'signup', 'b', B.uuid, at(0)),
    event(projectId, 'activate', 'b', B.uuid, at(20 * D)), // outside the 14-day window
    event(projectId, 'signup', 'c-anon', null, at(0)), // personless until the alias
    event(projectId, 'activate', 'c1', C.uuid, at(D)),
    event(projectId, 'signup', 'd1', D1.uuid, at(0)),
    event(projectId, 'activate', 'd2', D2.uuid, at(H)),
    event(projectId, 'pay', 'd2', D2.uuid, at(2 * H)),
    event(projectId, 'signup', 'e', E.uuid, at(5002)), // activate 1 ms before signup, in the same second
    event(projectId, 'activate', 'e', E.uuid, at(5001)),
    event(projectId, 'signup', 'f', F.uuid, at(3000)), // signup and activate at the same instant
    event(projectId, 'activate', 'f', F.uuid, at(3000)),
    event(projectId, 'signup', 'g', G.uuid, at(0)),
    event(projectId, 'activate', 'g', G.uuid, at(14 * D)), // exactly at the window's end: in
    event(projectId, 'signup', 'h', Hp.uuid, at(0)),
    event(projectId, 'activate', 'h', Hp.uuid, at(14 * D + 1)), // 1 ms past it: out
    event(projectId, 'signup', 'x', X.uuid, at(0)),
    event(projectId, 'activate', 'x', X.uuid, at(H)),
    event(projectId, 'pageview', 'x', X.uuid, at(H)),
    event(otherProjectId, 'signup', 'a', other.uuid, at(0)),
    event(otherProjectId, 'activate', 'a', other.uuid, at(H)),
  ]);
  await mirrorProjectDistinctIds(em(), ch, projectId);
  await mirrorProjectDistinctIds(em(), ch, otherProjectId);
});

afterAll(async () => {
  await orm.close();
});

describe('event store contract: PostgreSQL and ClickHouse', () => {
  it('counts the same events, and a retried batch adds none', async () => {
    const retry = [event(projectId, 'pageview', 'a', A.uuid, at(3 * H))];
    await insertBoth(retry);
    await insertBoth(retry);
    for (const store of [pg, ch]) {
      expect(await store.countEvents(projectId)).toBe(22);
      expect(await store.countEvents(projectId, 'signup')).toBe(9);
      expect(await store.countEvents(otherProjectId)).toBe(2);
    }
  });

  it('samples the same recent events for a tracking plan diff: the total since a time and the newest first', async () => {
    const since = at(20 * D);
    const answers = [];
    for (const store of [pg, ch]) {
      const all = await store.recentEventSample(projectId, since, 100);
      const two = await store.recentEventSample(projectId, since, 2);
      expect(two.total).toBe(all.total);
      expect(two.events).toHaveLength(Math.min(2, all.total));
      expect(all.events.every((e) => e.properties.$browser === 'Firefox')).toBe(true);
      answers.push({ total: all.total, names: all.events.map((e) => e.event).sort() });
    }
    expect(answers[0].total).toBeGreaterThan(0);
    expect(answers[1]).toEqual(answers[0]);
    for (const store of [pg, ch]) expect((await store.recentEventSample(projectId, at(400 * D), 10)).total).toBe(0);
  });

  it('gives the same funnel persons and drop-offs, to the microsecond and the window edge', async () => {
    const got = await sameAnswers();
    const ids = (step: number) => got[`all ${step}`].personIds;
    // Newest person first. E: activate came 1 ms before signup; F: same instant counts; G in, H out.
    expect(ids(1)).toEqual([X.id, Hp.id, G.id, F.id, E.id, D1.id, B.id, A.id]);
    expect(ids(2)).toEqual([X.id, G.id, F.id, A.id]);
    expect(ids(3)).toEqual([A.id]);
    expect(ids(-2)).toEqual([Hp.id, E.id, D1.id, B.id]);
    expect(got['page 1']).toEqual({ count: 8, personIds: [Hp.id, G.id] });
    // Correlation: who did `pageview` (A converted; X dropped at step 2); a step as the entity.
    expect(await sameCorrelation('pageview')).toEqual({ converted: [A.id], dropped: [X.id] });
    expect(await sameCorrelation('activate')).toEqual({
      converted: [A.id],
      dropped: [X.id, Hp.id, G.id, F.id, E.id, B.id],
    });
    // Lifecycle: on the first day everyone active resurrects (created long before); on the next, C does.
    const first = await sameLifecycle(at(0));
    expect(first['any resurrecting']).toEqual([X.id, Hp.id, G.id, F.id, E.id, D2.id, D1.id, B.id, A.id]);
    expect((await sameLifecycle(at(D)))['any resurrecting']).toEqual([C.id]);
    await sameLifecycle(at(D), 'America/New_York');
    // A narrower window and range change the answer the same way in both.
    const narrow = await sameAnswers({ ...funnel, windowDays: 1, to: new Date(T0 + 2 * D) });
    expect(narrow['all 2'].personIds).toEqual([X.id, F.id, A.id]);
  });

  it('moves events to the surviving person when persons merge after their events were stored', async () => {
    // An alias: the anonymous distinct id joins C. A merge: D2's distinct ids move to D1, D2 goes.
    await run(em(), `insert into person_distinct_id (project_id, person_id, distinct_id) values (?, ?, 'c-anon')`, [
      projectId,
      C.id,
    ]);
    await run(em(), `update person_distinct_id set person_id = ? where person_id = ?`, [D1.id, D2.id]);
    await run(em(), `delete from person where id = ?`, [D2.id]);
    expect(await mirrorProjectDistinctIds(em(), ch, projectId)).toBe(2);
    expect(await mirrorProjectDistinctIds(em(), ch, projectId)).toBe(0);
    const got = await sameAnswers();
    expect(got['all 2'].personIds).toEqual([X.id, G.id, F.id, D1.id, C.id, A.id]);
    expect(got['all 3'].personIds).toEqual([D1.id, A.id]);
    expect(got['all -3'].personIds).toEqual([X.id, G.id, F.id, C.id]);
    expect((await sameCorrelation('pay')).converted).toEqual([D1.id, A.id]); // D2's pay now D1's
    // D1's timeline has D2's events now; bounded by time and by count the same way.
    expect(await sameTimeline(D1.id)).toEqual(['signup@0', `activate@${H}`, `pay@${2 * H}`]);
    expect(await sameTimeline(D1.id, at(H))).toEqual(['signup@0', `activate@${H}`]);
    expect(await sameTimeline(D1.id, funnel.to, 1)).toEqual(['signup@0']);
    expect(await sameTimeline(C.id)).toEqual(['signup@0', `activate@${D}`]);
    const next = await sameLifecycle(at(D));
    expect(next['any returning']).toEqual([C.id]); // c-anon's signup the day before is C's now
    expect(next['any dormant']).not.toContain(D2.id);
  });

  it('deletes a person’s events up to the cutoff, counts them, and the person leaves every answer', async () => {
    const cutoff = (await rows<{ now: string }>(em(), `select now()::text as now`))[0].now;
    const late = event(projectId, 'signup', 'x', X.uuid, at(4 * H)); // arrives after the cutoff: kept
    await new Promise((resolve) => setTimeout(resolve, 5)); // created_at strictly after the cutoff
    await insertBoth([late]);
    const group = { cutoff, personIds: [X.uuid], distinctIds: ['x'] };
    const deleted: Record<string, { recorded: number; windows: number; inTx: boolean[] }> = {};
    for (const store of [pg, ch]) {
      const log = { recorded: 0, windows: 0, inTx: [] as boolean[] };
      const n = await store.deletePersonEvents(projectId, [group], {
        record: async (k, tx) => {
          log.recorded += k;
          log.inTx.push(tx !== null);
        },
        done: async () => {
          log.windows++;
        },
      });
      expect(n).toBe(3);
      expect(log.recorded).toBe(3);
      expect(await store.countPersonEvents(projectId, [group])).toBe(0);
      deleted[store.engine] = log;
    }
    expect(deleted.postgres.windows).toBeGreaterThan(1); // windows of about DELETION_CHUNK_SIZE rows
    expect(deleted.postgres.inTx.every(Boolean)).toBe(true);
    expect(deleted.clickhouse).toEqual({ recorded: 3, windows: 1, inTx: [false] }); // one statement
    // The person is deleted: its mapping goes too. The late event is its only one left, in both.
    await run(em(), `delete from person where id = ?`, [X.id]);
    await mirrorProjectDistinctIds(em(), ch, projectId);
    for (const store of [pg, ch]) expect(await store.countEvents(projectId, 'signup')).toBe(9);
    const got = await sameAnswers();
    expect(got['all 1'].personIds).not.toContain(X.id);
    expect(await sameTimeline(X.id)).toEqual([]);
    expect(got['all 2'].personIds).toEqual([G.id, F.id, D1.id, C.id, A.id]);
    // Nothing of another project was touched.
    for (const store of [pg, ch]) expect(await store.countEvents(otherProjectId)).toBe(2);
  });

  it('with EVENT_STORE=clickhouse, deletes from PostgreSQL (the source) and ClickHouse, counting the events once', async () => {
    const both = withPostgresSource(pg, ch, orm);
    const cutoff = (await rows<{ now: string }>(em(), `select now()::text as now`))[0].now;
    const group = { cutoff, personIds: [B.uuid], distinctIds: ['b'] };
    let recorded = 0;
    const n = await both.deletePersonEvents(projectId, [group], {
      record: async (k) => {
        recorded += k;
      },
      done: async () => undefined,
    });
    expect([n, recorded]).toEqual([2, 2]);
    expect(await pg.countPersonEvents(projectId, [group])).toBe(0);
    expect(await ch.countPersonEvents(projectId, [group])).toBe(0);
    expect(await both.countPersonEvents(projectId, [group])).toBe(0);
    // A copy shipped after the delete (it keeps its PostgreSQL arrival time) is a survivor: the job retries.
    await ch.insertRows([
      {
        uuid: randomUUID(),
        project_id: projectId,
        event: 'signup',
        distinct_id: 'b',
        person_id: B.uuid,
        properties: '{}',
        timestamp: chTime(at(0)),
        created_at: chTime(at(0)),
      },
    ]);
    expect(await both.countPersonEvents(projectId, [group])).toBe(1);
  });
});

describe("event store contract: lifecycle buckets by the persons' creation", () => {
  it('puts persons created before, on and after the day in the same buckets and pages them alike', async () => {
    const project = (await createAccount(orm)).projectId;
    const day = 10 * D; // from T0
    /** A person created at `created` (ms from T0) with events at these times (ms from T0). */
    const made = async (name: string, created: number, times: number[]) => {
      const p = await insertPerson(em(), project, [name]);
      await run(em(), `update person set created_at = ? where id = ?`, [at(created), p.id]);
      await insertBoth(times.map((t) => event(project, t < day ? 'pageview' : 'signup', name, p.uuid, at(t))));
      return p.id;
    };
    const old = -365 * D;
    const returning1 = await made('r1', old, [day - H, day + H]);
    const resurrecting1 = await made('s1', old, [day + 2 * H]);
    const dormant1 = await made('d1', old, [day - 2 * H]);
    const returning2 = await made('r2', old + 1, [day - 3 * H, day + 3 * H]);
    const resurrecting2 = await made('s2', day - 1, [day + 4 * H]); // created 1 ms before the day
    const new1 = await made('n1', day, [day + 5 * H]); // created as the day starts
    const new2 = await made('n2', day + H, [day - 4 * H, day + 6 * H]); // active before it was created
    const dormant2 = await made('d2', day + 2 * H, [day - 5 * H]); // created that day, active the day before only
    await made('l1', day + D, [day + 7 * H]); // created after the day: in no bucket that day
    const dormant3 = await made('l2', day + 2 * D, [day - 6 * H]);
    await made('q', old, [day - 2 * D, day + D]); // active on neither day
    // An id past a JS number's precision (2^53 + an odd number is no double), new to this database.
    const big = (2n ** 53n + 1n + 2n * BigInt(Math.floor(Math.random() * 1e9))).toString();
    const bigUuid = randomUUID();
    await run(em(), `insert into person (id, uuid, project_id, created_at) values (?, ?, ?, ?)`, [
      big,
      bigUuid,
      project,
      at(old + 2),
    ]);
    await run(em(), `insert into person_distinct_id (project_id, person_id, distinct_id) values (?, ?, 'big')`, [
      project,
      big,
    ]);
    await insertBoth([
      event(project, 'pageview', 'big', bigUuid, at(day - H)),
      event(project, 'signup', 'big', bigUuid, at(day + H)),
    ]);
    await mirrorProjectDistinctIds(em(), ch, project);
    const stores: EventStore[] = [ch];
    const expected: Record<string, string[]> = {
      new: [new2, new1],
      returning: [big, returning2, returning1],
      resurrecting: [resurrecting2, resurrecting1],
      dormant: [dormant3, dormant2, dormant1],
    };
    for (const timezone of ['UTC', 'Asia/Tokyo'])
      for (const event of [null, 'signup'])
        for (const type of ['new', 'returning', 'resurrecting', 'dormant'] as const)
          for (const page of [
            { limit: 100, offset: 0 },
            { limit: 1, offset: 0 },
            { limit: 1, offset: 1 },
            { limit: 2, offset: 1 },
            { limit: 5, offset: 3 },
          ]) {
            const lifecycle = { day: at(day), type, event, timezone };
            const fromPg = await pg.lifecyclePersonIds(project, lifecycle, page);
            if (timezone === 'UTC' && event === null && page.limit === 100)
              expect(fromPg, type).toEqual({ count: expected[type].length, personIds: expected[type] });
            for (const store of stores)
              expect(await store.lifecyclePersonIds(project, lifecycle, page), `${type} ${timezone} ${event}`).toEqual(
                fromPg,
              );
          }
  });
});

describe('event store contract: behavioural cohorts and counts', () => {
  const purchase = (distinctId: string, uuid: string | null, t: Date, properties: Record<string, unknown>) => ({
    ...event(projectId, 'purchase', distinctId, uuid, t),
    properties,
  });

  /** The persons of a behavioural filter, from both stores: the same. */
  async function samePerformers(eventFilters: unknown, times = 1, since = at(0), among?: string[]): Promise<string[]> {
    const query = { event: 'purchase', since, times, eventFilters };
    const fromPg = await pg.performedEventPersonIds(projectId, query, among);
    expect(await ch.performedEventPersonIds(projectId, query, among)).toEqual(fromPg);
    return fromPg;
  }

  it('finds the same persons for performed_event filters: counts, since, merged persons, event properties', async () => {
    await insertBoth([
      purchase('a', A.uuid, at(D), { plan: 'pro', amount: 30, at: '2026-03-01T10:00:00Z' }),
      purchase('a', A.uuid, at(2 * D), { plan: 'free', amount: '5' }),
      purchase('a', A.uuid, at(3 * D), { plan: 'Pro Max', amount: 100.5 }),
      purchase('c-anon', null, at(D), { plan: 'pro', amount: 10, tags: ['x'], nested: { a: 1 } }), // C's by alias
      purchase('d2', D2.uuid, at(D), { plan: 'pro', amount: 20 }), // D1's since the merge
      purchase('d1', D1.uuid, at(2 * D), { plan: null }),
      purchase('e', E.uuid, at(5 * D), { amount: 'n/a' }),
      purchase('f', F.uuid, at(-10 * D), { plan: 'pro' }), // before `since`
      purchase('nobody', null, at(D), { plan: 'pro' }), // no person
      { ...event(otherProjectId, 'purchase', 'a', null, at(D)), properties: { plan: 'pro' } },
    ]);
    await mirrorProjectDistinctIds(em(), ch, projectId);
    expect(await samePerformers([])).toEqual([A.id, C.id, D1.id, E.id]);
    expect(await samePerformers([], 2)).toEqual([A.id, D1.id]);
    expect(await samePerformers([], 3)).toEqual([A.id]);
    expect(await samePerformers([], 1, at(-20 * D))).toEqual([A.id, C.id, D1.id, E.id, F.id]);
    // Since before ClickHouse's DateTime64 range (an explicit_datetime of 1800), or past it.
    expect(await samePerformers([], 1, new Date('1800-01-01T00:00:00Z'))).toEqual([A.id, C.id, D1.id, E.id, F.id]);
    expect(await samePerformers([], 1, new Date('2500-01-01T00:00:00Z'))).toEqual([]);
    expect(await samePerformers([], 1, at(0), [A.id, E.id, F.id])).toEqual([A.id, E.id]);
    const plan = (operator: string, value?: unknown) => [{ key: 'plan', operator, value, type: 'event' }];
    const amount = (operator: string, value?: unknown) => [{ key: 'amount', operator, value, type: 'event' }];
    expect(await samePerformers(plan('exact', 'pro'))).toEqual([A.id, C.id, D1.id]);
    expect(await samePerformers(plan('exact', ['free', 'pro']))).toEqual([A.id, C.id, D1.id]);
    expect(await samePerformers(plan('exact', 'pro'), 2)).toEqual([]);
    expect(await samePerformers(plan('is_not', 'pro'))).toEqual([A.id, D1.id, E.id]); // null and missing: not pro
    expect(await samePerformers(plan('icontains', 'PRO'))).toEqual([A.id, C.id, D1.id]);
    expect(await samePerformers(plan('icontains', ['max', 'free']))).toEqual([A.id]);
    expect(await samePerformers(plan('not_icontains', 'pro'))).toEqual([A.id, D1.id, E.id]);
    expect(await samePerformers(plan('regex', '^P'))).toEqual([A.id]);
    expect(await samePerformers(plan('not_regex', '^p'))).toEqual([A.id, D1.id, E.id]);
    expect(await samePerformers(plan('regex', '('))).toEqual([]); // an invalid pattern matches nothing
    expect(await samePerformers(plan('is_set'))).toEqual([A.id, C.id, D1.id]); // a null value is set
    expect(await samePerformers(plan('is_not_set'))).toEqual([E.id]);
    expect(await samePerformers(amount('gt', 15))).toEqual([A.id, D1.id]);
    expect(await samePerformers(amount('lte', 10))).toEqual([A.id, C.id]); // '5' read as a number
    expect(await samePerformers(amount('between', [5, 10]))).toEqual([A.id, C.id]);
    expect(await samePerformers(amount('not_between', [0, 50]))).toEqual([A.id, D1.id, E.id]);
    expect(await samePerformers(amount('exact', 5))).toEqual([A.id]); // the string '5'
    expect(await samePerformers(amount('exact', '100.5'))).toEqual([A.id]);
    expect(await samePerformers(amount('exact', 10))).toEqual([C.id]);
    expect(
      await samePerformers([{ key: 'at', operator: 'is_date_before', value: '2026-03-02', type: 'event' }]),
    ).toEqual([A.id]);
    expect(
      await samePerformers({
        type: 'OR',
        values: [
          { key: 'plan', operator: 'exact', value: 'free' },
          { key: 'amount', operator: 'lt', value: 15 },
        ],
      }),
    ).toEqual([A.id, C.id]);
    // A malformed filter is the same error from both.
    const bad = { event: 'purchase', since: at(0), times: 1, eventFilters: plan('bogus', 1) };
    await expect(pg.performedEventPersonIds(projectId, bad)).rejects.toThrow('Unknown property filter operator');
    await expect(ch.performedEventPersonIds(projectId, bad)).rejects.toThrow('Unknown property filter operator');
  });

  it('counts a deletion group’s events by person and distinct id, and the events before a time, the same', async () => {
    const cutoff = (await rows<{ now: string }>(em(), `select now()::text as now`))[0].now;
    const group = { cutoff, personIds: [A.uuid, C.uuid], distinctIds: ['a', 'c-anon', 'c1'] };
    const key = (c: { personId: string | null; distinctId: string; n: number }) =>
      `${c.personId ?? '-'} ${c.distinctId} ${c.n}`;
    const fromPg = (await pg.personEventCounts(projectId, group)).map(key).sort();
    expect((await ch.personEventCounts(projectId, group)).map(key).sort()).toEqual(fromPg);
    expect(fromPg).toEqual(
      [`${A.uuid} a 7`, `${C.uuid} c1 1`, '- c-anon 2'].sort(), // A: 3 funnel steps, a pageview, 3 purchases
    );
    expect(await ch.personEventCounts(projectId, { cutoff, personIds: [], distinctIds: [] })).toEqual([]);
    // With EVENT_STORE=clickhouse the counts are the source's (PostgreSQL).
    expect((await withPostgresSource(pg, ch, orm).personEventCounts(projectId, group)).map(key).sort()).toEqual(fromPg);
    // (The other project: this one's ClickHouse copy holds the survivor the test before inserted.)
    const counts = async (store: EventStore) =>
      Promise.all([at(0), at(H), at(H + 1), at(100 * D)].map((t) => store.countEventsBefore(otherProjectId, t)));
    expect(await counts(pg)).toEqual([0, 1, 2, 3]);
    expect(await counts(ch)).toEqual([0, 1, 2, 3]);
    expect(await pg.countEventsBefore(projectId, at(0))).toBe(1); // F's early purchase
    expect(await ch.countEventsBefore(projectId, at(0))).toBe(1);
    expect(await counts(pg)).toEqual(await counts(ch));
    for (const store of [pg, ch]) {
      expect(await store.countEventsBefore(otherProjectId, new Date('1800-01-01T00:00:00Z'))).toBe(0);
      expect(await store.countEventsBefore(otherProjectId, new Date('2500-01-01T00:00:00Z'))).toBe(3);
    }
  });
});

describe('event store contract: flag values on recent events', () => {
  it('says the same whether the last week’s events of some names carry $feature/ properties', async () => {
    const ago = (days: number) => new Date(Date.now() - days * D);
    const named = (name: string, t: Date, properties: Record<string, unknown>) => ({
      ...event(otherProjectId, name, 'a', null, t),
      properties,
    });
    await insertBoth([
      named('flagged', ago(1), { '$feature/new-checkout': 'test', $browser: 'Firefox' }),
      named('plain', ago(1), { feature: 'x', $feature_flag: 'new-checkout' }),
      named('stale', ago(8), { '$feature/new-checkout': 'control' }),
    ]);
    for (const store of [pg, ch]) {
      const carry = (events: string[]) => store.recentEventsCarryFlagValues(otherProjectId, events);
      expect([
        await carry(['flagged']),
        await carry(['plain', 'flagged']),
        await carry(['plain']),
        await carry(['stale']),
        await carry(['none']),
      ]).toEqual([true, true, false, false, false]);
      expect(await store.recentEventsCarryFlagValues(projectId, ['flagged'])).toBe(false); // another project's
    }
  });
});

describe('event store contract: experiment results', () => {
  const FLAG = 'contract-exp';
  const start = new Date(T0 + 9 * H); // 09:00 on the start day
  const until = new Date(T0 + 6 * D + 5 * H); // seven days, the last one partial
  const metrics: ExperimentMetric[] = [
    { uuid: 'revenue', metric_type: 'mean', source: { event: 'purchase', math: 'sum', math_property: 'amount' } },
    { uuid: 'purchases', metric_type: 'mean', source: { event: 'purchase' } },
    { uuid: 'checkout', metric_type: 'funnel', series: [{ event: 'cart' }, { event: 'purchase' }] },
  ];
  const experiment = (cupedLookbackDays = 0): ExperimentForResults => ({
    id: 0,
    projectId,
    flagKey: FLAG,
    variants: ['control', 'test'],
    startDate: start,
    statsMethod: 'bayesian',
    baselineKey: 'control',
    cupedLookbackDays,
  });
  const named = (name: string, distinctId: string, t: number, properties: Record<string, unknown> = {}) => ({
    ...event(projectId, name, distinctId, null, new Date(T0 + t)),
    properties,
  });
  const exposed = (distinctId: string, variant: unknown, t: number, flag = FLAG) =>
    named('$feature_flag_called', distinctId, t, { $feature_flag: flag, $feature_flag_response: variant });
  const bought = (distinctId: string, t: number, amount: unknown) => named('purchase', distinctId, t, { amount });

  /** Each metric's counts per day, from one store (nothing stored: no state is written). */
  const counts = async (store: EventStore, cuped = 0) =>
    computeExperimentCounts(em(), store, experiment(cuped), metrics, until);

  beforeAll(async () => {
    // Persons: a merged one (events under an anonymous id with no person stamped, and the id it was
    // merged from), one who switches variant (leaves), one with events before the start (CUPED's
    // lookback), one never exposed, and a distinct id whose person was deleted (no mapping).
    await person(projectId, 'xa');
    await person(projectId, 'xb', 'xb-anon', 'xb-merged');
    await person(projectId, 'xc');
    await person(projectId, 'xd');
    await person(projectId, 'xe');
    await insertBoth([
      exposed('xa', 'control', 10 * H),
      bought('xa', 11 * H, 10),
      bought('xa', D + H, '5.5'), // a numeric string
      bought('xa', D + 2 * H, ' 7 '), // with spaces
      bought('xa', 2 * D, 'abc'), // not a number: counts, adds 0
      named('cart', 'xa', 2 * D + H, { amount: 3 }),
      bought('xa', 2 * D + 2 * H, 1e3),
      exposed('xb-anon', 'test', 9 * H + 30 * 60_000),
      named('cart', 'xb-merged', 12 * H),
      bought('xb', 13 * H, 20),
      exposed('xb', 'test', 3 * D), // again, the same variant
      exposed('xc', 'control', 10 * H),
      named('cart', 'xc', 11 * H),
      bought('xc', 12 * H, 3),
      exposed('xc', 'test', 2 * D), // a second variant: leaves that day
      bought('xc', 3 * D, 100),
      bought('xd', -2 * D, 40), // before the start: in CUPED's lookback (7 days before the exposure)
      bought('xd', -3 * D, 30), // 7 days and an hour before it: outside
      named('cart', 'xd', -2 * D + H),
      exposed('xd', 'control', -D), // before the start: not an exposure
      exposed('xd', 'test', 4 * D + H),
      bought('xd', 4 * D + 2 * H, 8),
      bought('xe', D, 50), // never exposed
      exposed('xe', 'control', D, 'another-flag'),
      exposed('xgone', 'test', D), // a deleted person's distinct id
      bought('xgone', D + H, 9),
      exposed('xa', 'test', 6 * D + 6 * H), // after `until`
      bought('xw\t\\weird"\n', D, 'a\\b\tc\n'), // a distinct id and a value with tabs, backslashes, a newline: read back whole
    ]);
    // ClickHouse folds by its mirror of the persons (as the shipper keeps it).
    await mirrorProjectDistinctIds(em(), ch, projectId);
    // Statistics, as a database in use has them: PostgreSQL's parts follow the planner's estimate.
    await orm.em.getConnection().execute('analyze event');
  });

  it('gives the same daily counts from both stores, by the current persons', async () => {
    for (const cuped of [0, 7]) {
      const fromPg = await counts(pg, cuped);
      expect(await counts(ch, cuped)).toEqual(fromPg);
      // Folded a person or so at a time (batches of 2 events; the merged person last): the same.
      for (const store of [pg, ch, chParts, pgParts])
        expect(
          await computeExperimentCounts(em(), store, experiment(cuped), metrics, until, { batchEvents: 2 }),
        ).toEqual(fromPg);
      const last = fromPg.map((m) => (m as MetricStats[]).at(-1)!.variants);
      // revenue: control xa 10+5.5+7+0+1000 (xc left on day 2: counts nowhere); test xb 20, xd 8
      expect(last[0].map((v) => [v.key, v.number_of_samples, v.sum])).toEqual([
        ['control', 1, 1022.5],
        ['test', 2, 28],
      ]);
      // purchases per person, and the funnel cart → purchase (xb's cart under the merged id)
      expect(last[1].map((v) => v.sum)).toEqual([5, 2]);
      expect(last[2].map((v) => v.step_counts)).toEqual([
        [1, 1],
        [1, 1],
      ]);
      if (cuped) expect(last[0].map((v) => v.covariate_sum)).toEqual([0, 40]); // xd's purchase 6 days and an hour before
      // On day 1 (index 1) xc still counts for control.
      expect((fromPg[0] as MetricStats[])[1].variants[0].number_of_samples).toBe(2);
    }
  });

  it('folds inside ClickHouse as the worker folds the events: repeated funnel steps, sums without a property, ratios', async () => {
    const more: ExperimentMetric[] = [
      { uuid: 'f3', metric_type: 'funnel', series: [{ event: 'cart' }, { event: 'purchase' }, { event: 'purchase' }] },
      { uuid: 'carts', metric_type: 'mean', source: { event: 'cart', math: 'sum', math_property: 'amount' } },
      { uuid: 'no-property', metric_type: 'mean', source: { event: 'purchase', math: 'sum' } },
      {
        uuid: 'per-cart',
        metric_type: 'ratio',
        numerator: { event: 'purchase', math: 'sum', math_property: 'amount' },
        denominator: { event: 'cart' },
      },
      {
        uuid: 'same-event',
        metric_type: 'ratio',
        numerator: { event: 'purchase', math: 'sum', math_property: 'amount' },
        denominator: { event: 'purchase' },
      },
    ];
    // The same store without the engine's fold: the worker folds ClickHouse's events.
    const byEvents: EventStore = { ...ch, experimentDayChanges: undefined };
    let folded = 0;
    const inEngine: EventStore = {
      ...ch,
      experimentDayChanges: (project, request) => {
        folded += request.metrics.length;
        return ch.experimentDayChanges!(project, request);
      },
    };
    for (const cuped of [0, 7]) {
      const fromPg = await computeExperimentCounts(em(), pg, experiment(cuped), more, until);
      expect(await computeExperimentCounts(em(), inEngine, experiment(cuped), more, until)).toEqual(fromPg);
      expect(await computeExperimentCounts(em(), byEvents, experiment(cuped), more, until)).toEqual(fromPg);
      // A step is the first event of its name at or after the step before: a repeated step may be the same event.
      const last = fromPg.map((m) => (m as MetricStats[]).at(-1)!.variants);
      expect(last[0].map((v) => v.step_counts)).toEqual([
        [1, 1, 1],
        [1, 1, 1],
      ]);
    }
    expect(folded).toBe(2 * more.length);
    // Each metric alone (one statement reads whatever the metrics need: a funnel alone reads no value).
    for (const one of more)
      expect(await computeExperimentCounts(em(), ch, experiment(7), [one], until)).toEqual(
        await computeExperimentCounts(em(), pg, experiment(7), [one], until),
      );
  });

  it('keeps each event’s own exposure and values when a distinct id’s events share a microsecond', async () => {
    const at = T0 + 5 * H;
    const same = (name: string, properties: Record<string, unknown>) => ({
      ...event(otherProjectId, name, 'same-µs', null, new Date(at)),
      properties,
    });
    await insertBoth([
      same('purchase', { amount: 5 }),
      same('purchase', {}),
      same('purchase', { amount: '7' }),
      same('$feature_flag_called', { $feature_flag: FLAG, $feature_flag_response: 'test' }),
      same('$feature_flag_called', { $feature_flag: FLAG, $feature_flag_response: 'control' }),
      same('$feature_flag_called', { $feature_flag: 'another-flag', $feature_flag_response: 'x' }),
      same('cart', { amount: 1 }),
    ]);
    const filter = { flagKey: FLAG, events: ['purchase', 'cart'], from: new Date(at), to: new Date(at + 1) };
    const seen = async (store: EventStore) =>
      (await experimentRead(store, otherProjectId, filter, [{ key: 'amount', events: ['purchase'] }]))
        .map((e) => JSON.stringify([e.distinctId, e.t - at * 1000, e.event, e.exposure, e.values]))
        .sort();
    const fromPg = await seen(pg);
    expect(fromPg).toEqual(
      [
        ['purchase', null, [5]],
        ['purchase', null, [null]],
        ['purchase', null, ['7']],
        ['$feature_flag_called', 'test', [null]],
        ['$feature_flag_called', 'control', [null]],
        ['cart', null, [null]],
      ]
        .map(([name, exposure, values]) => JSON.stringify(['same-µs', 0, name, exposure, values]))
        .sort(),
    );
    expect(await seen(ch)).toEqual(fromPg);
  });

  it('reads the same events, and knows the same about late arrivals and distinct ids', async () => {
    // A purchase's amount (a cart's, asked of purchases only, reads as null).
    const AMOUNT = [{ key: 'amount', events: ['purchase'] }];
    const filter = { flagKey: FLAG, events: ['purchase', 'cart'], from: start, to: until };
    const read = async (store: EventStore, f: ExperimentEventFilter = filter) =>
      (await experimentRead(store, projectId, f, AMOUNT)).sort(
        (a, b) => a.t - b.t || a.event.localeCompare(b.event) || a.distinctId.localeCompare(b.distinctId),
      );
    const fromPg = await read(pg);
    expect(await read(ch)).toEqual(fromPg);
    expect(await read(chParts)).toEqual(fromPg);
    // As they come: each distinct id's events together, in time order, and the ids in byte order
    // (read in parts too).
    expect(await read(pgParts)).toEqual(fromPg);
    const order = async (store: EventStore) =>
      (await experimentRead(store, projectId, filter, AMOUNT)).map((e) => `${e.distinctId} ${e.t} ${e.event}`);
    expect(await order(chParts)).toEqual(await order(pg));
    expect(await order(pgParts)).toEqual(await order(pg));
    for (const store of [pg, ch]) {
      const found = await experimentRead(store, projectId, filter, AMOUNT);
      const order = found.map((e) => `${e.distinctId} ${e.t}`);
      const ids = found.map((e) => e.distinctId).filter((id, i, all) => i === 0 || all[i - 1] !== id);
      expect(new Set(ids).size).toBe(ids.length);
      expect(found.every((e, i) => i === 0 || e.distinctId !== found[i - 1].distinctId || e.t >= found[i - 1].t)).toBe(
        true,
      );
      expect(order.length).toBe(fromPg.length);
    }
    expect(fromPg.filter((e) => e.exposure !== null).map((e) => e.exposure)).toEqual([
      'test',
      'control',
      'control',
      'test',
      'test',
      'test',
      'test',
    ]);
    expect(fromPg.find((e) => e.distinctId === 'xa' && e.event === 'purchase')?.values).toEqual([10]);
    expect(fromPg.find((e) => e.distinctId === 'xa' && e.event === 'cart')?.values).toEqual([null]);
    expect(fromPg.find((e) => e.distinctId.startsWith('xw'))).toMatchObject({
      distinctId: 'xw\t\\weird"\n',
      values: ['a\\b\tc\n'],
    });
    const narrow = { ...filter, distinctIds: ['xc', 'x-nobody'] };
    expect(await read(ch, narrow)).toEqual(await read(pg, narrow));
    expect((await read(pg, narrow)).map((e) => e.distinctId)).toEqual(['xc', 'xc', 'xc', 'xc', 'xc']);

    const before = new Date();
    for (const store of [pg, ch]) {
      expect(await store.hasExperimentEvents(projectId, narrow)).toBe(true);
      expect(await store.hasExperimentEvents(projectId, { ...filter, distinctIds: ['x-nobody'] })).toBe(false);
      expect(await store.hasExperimentEvents(projectId, filter, before)).toBe(false);
    }
    await insertBoth([bought('xe', 2 * D, 1)]); // late, and not exposed: still an event of the filter
    for (const store of [pg, ch]) expect(await store.hasExperimentEvents(projectId, filter, before)).toBe(true);
  });
});
