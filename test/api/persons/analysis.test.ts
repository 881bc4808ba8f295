import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../../db.ts';
import { capture } from '../../fixtures.ts';
import { call, createAccount, startApi, type TestAccount, type TestApi } from '../../helpers.ts';

let api: TestApi;
let account: TestAccount;
const P = () => `/api/projects/${account.projectId}/persons`;
const day = (d: number, h = 12) => `2026-03-${String(d).padStart(2, '0')}T${String(h).padStart(2, '0')}:00:00Z`;

beforeAll(async () => {
  api = await startApi();
  account = await createAccount(api.orm);
  // u1 completes signup → activate → pay; u2 stops after activate; u3 only signs up;
  // u4 activates before signing up (out of order: not a step 2 conversion).
  await capture(api.baseUrl, account.projectToken, [
    {
      event: 'signup',
      distinct_id: 'u1',
      timestamp: day(2),
      properties: { $set: { email: 'u1@x.com', plan: 'free' } },
    },
    { event: 'activate', distinct_id: 'u1', timestamp: day(3) },
    { event: 'pay', distinct_id: 'u1', timestamp: day(4), properties: { $set: { plan: 'pro' } } },
    { event: 'signup', distinct_id: 'u2', timestamp: day(2) },
    { event: 'activate', distinct_id: 'u2', timestamp: day(5) },
    { event: 'signup', distinct_id: 'u3', timestamp: day(3) },
    { event: 'help', distinct_id: 'u3', timestamp: day(3, 13) },
    { event: 'activate', distinct_id: 'u4', timestamp: day(1) },
    { event: 'signup', distinct_id: 'u4', timestamp: day(2) },
  ]);
});
afterAll(() => api.close());

const funnelQuery = (extra: string) =>
  `?events=${encodeURIComponent(
    JSON.stringify([
      { id: 'signup', order: 0 },
      { id: 'activate', order: 1 },
      { id: 'pay', order: 2 },
    ]),
  )}&date_from=2026-03-01&date_to=2026-03-10${extra}`;
const people = (body: any) => body.results[0].people.map((p: any) => p.distinct_ids[0]).sort();

describe('funnel persons', () => {
  it('lists persons who reached a step, and those who dropped off before one', async () => {
    const reached2 = await call(api.baseUrl, 'GET', `${P()}/funnel/${funnelQuery('&funnel_step=2')}`, {
      key: account.apiKey,
    });
    expect(reached2.status).toBe(200);
    expect(people(reached2.body)).toEqual(['u1', 'u2']);
    expect(reached2.body.results[0].count).toBe(2);
    expect(reached2.body).toMatchObject({ next: null, missing_persons: 0, is_cached: false });
    expect(
      people(
        (await call(api.baseUrl, 'GET', `${P()}/funnel/${funnelQuery('&funnel_step=1')}`, { key: account.apiKey }))
          .body,
      ),
    ).toEqual(['u1', 'u2', 'u3', 'u4']);
    expect(
      people(
        (await call(api.baseUrl, 'GET', `${P()}/funnel/${funnelQuery('&funnel_step=3')}`, { key: account.apiKey }))
          .body,
      ),
    ).toEqual(['u1']);
    expect(
      people(
        (await call(api.baseUrl, 'GET', `${P()}/funnel/${funnelQuery('&funnel_step=-3')}`, { key: account.apiKey }))
          .body,
      ),
    ).toEqual(['u2']);
    const post = await call(api.baseUrl, 'POST', `${P()}/funnel/`, {
      key: account.apiKey,
      body: {
        events: [{ id: 'signup' }, { id: 'activate' }],
        funnel_step: -2,
        date_from: '2026-03-01',
        date_to: '2026-03-10',
      },
    });
    expect(people(post.body)).toEqual(['u3', 'u4']);
  });

  it('respects the conversion window', async () => {
    const res = await call(api.baseUrl, 'GET', `${P()}/funnel/${funnelQuery('&funnel_step=2&funnel_window_days=2')}`, {
      key: account.apiKey,
    });
    expect(people(res.body)).toEqual(['u1']); // u2 activated 3 days after signing up
  });

  it('answers bad steps with 400', async () => {
    for (const extra of ['&funnel_step=9', '&funnel_step=0', '&funnel_window_days=0']) {
      expect(
        (await call(api.baseUrl, 'GET', `${P()}/funnel/${funnelQuery(extra)}`, { key: account.apiKey })).status,
        extra,
      ).toBe(400);
    }
    expect((await call(api.baseUrl, 'GET', `${P()}/funnel/?events=nope`, { key: account.apiKey })).status).toBe(400);
  });

  it('correlation: persons who did not convert and performed an event', async () => {
    const q = funnelQuery(
      `&funnel_correlation_person_entity=${encodeURIComponent('{"id":"help","type":"events"}')}&funnel_correlation_person_converted=false`,
    );
    const res = await call(api.baseUrl, 'GET', `${P()}/funnel/correlation/${q}`, { key: account.apiKey });
    expect(res.status).toBe(200);
    expect(people(res.body)).toEqual(['u3']);
  });
});

describe('lifecycle persons', () => {
  it('buckets persons as new, returning, resurrecting and dormant', async () => {
    const bucket = async (date: string, type: string) =>
      people(
        (
          await call(api.baseUrl, 'GET', `${P()}/lifecycle/?target_date=${date}&lifecycle_type=${type}`, {
            key: account.apiKey,
          })
        ).body,
      );
    // Persons are created at their first event's time.
    expect(await bucket('2026-03-02', 'new')).toEqual(['u1', 'u2']);
    expect(await bucket('2026-03-02', 'returning')).toEqual(['u4']);
    expect(await bucket('2026-03-03', 'returning')).toEqual(['u1']);
    expect(await bucket('2026-03-03', 'dormant')).toEqual(['u2', 'u4']);
    expect(await bucket('2026-03-05', 'resurrecting')).toEqual(['u2']);
    const missing = await call(api.baseUrl, 'GET', `${P()}/lifecycle/?lifecycle_type=new`, { key: account.apiKey });
    expect(missing.status).toBe(400);
    expect(missing.body.detail).toBe('Must include specified date');
    expect(
      (await call(api.baseUrl, 'GET', `${P()}/lifecycle/?target_date=2026-03-02`, { key: account.apiKey })).body.detail,
    ).toBe('Must include lifecycle type');
  });
});

describe('cohorts and timeline', () => {
  it('lists the static and dynamic (property and behavioral) cohorts a person is in', async () => {
    const insert = async (name: string, isStatic: boolean, filters: unknown) =>
      (
        await sql(
          api.orm,
          `insert into cohort (project_id, name, is_static, filters, count) values (?, ?, ?, ?::jsonb, 1) returning id`,
          [account.projectId, name, isStatic, JSON.stringify(filters)],
        )
      )[0].id;
    const u1 = (await call(api.baseUrl, 'GET', `${P()}/?distinct_id=u1`, { key: account.apiKey })).body.results[0];
    const staticId = await insert('static', true, null);
    await sql(api.orm, `insert into cohort_person (cohort_id, person_id) select ?, id from person where uuid = ?`, [
      staticId,
      u1.uuid,
    ]);
    const proId = await insert('pro users', false, {
      properties: { type: 'AND', values: [{ key: 'plan', value: 'pro', type: 'person' }] },
    });
    const payersId = await insert('payers', false, {
      properties: {
        type: 'OR',
        values: [
          {
            type: 'OR',
            values: [
              {
                type: 'behavioral',
                value: 'performed_event',
                key: 'pay',
                event_type: 'events',
                explicit_datetime: '2026-03-01T00:00:00Z',
                event_filters: [],
              },
            ],
          },
        ],
      },
    });
    await insert('helpers', false, {
      properties: {
        type: 'AND',
        values: [
          {
            type: 'behavioral',
            value: 'performed_event',
            key: 'help',
            event_type: 'events',
            explicit_datetime: '2026-03-01T00:00:00Z',
          },
        ],
      },
    });
    const res = await call(api.baseUrl, 'GET', `${P()}/cohorts/?person_id=${u1.uuid}`, { key: account.apiKey });
    expect(res.status).toBe(200);
    expect(res.body.results.map((c: any) => c.id).sort()).toEqual([staticId, proId, payersId].sort());
    expect(Object.keys(res.body.results[0]).sort()).toEqual(['count', 'id', 'name']);
    // The same cohort as a list filter.
    const filtered = await call(
      api.baseUrl,
      'GET',
      `${P()}/?properties=${encodeURIComponent(JSON.stringify([{ type: 'cohort', key: 'id', value: payersId }]))}`,
      { key: account.apiKey },
    );
    expect(filtered.body.results.map((p: any) => p.uuid)).toEqual([u1.uuid]);
    expect((await call(api.baseUrl, 'GET', `${P()}/cohorts/`, { key: account.apiKey })).status).toBe(400);
  });

  it('rebuilds the properties timeline from the person’s events', async () => {
    const u1 = (await call(api.baseUrl, 'GET', `${P()}/?distinct_id=u1`, { key: account.apiKey })).body.results[0];
    const res = await call(
      api.baseUrl,
      'GET',
      `${P()}/${u1.uuid}/properties_timeline/?properties=${encodeURIComponent('[{"key":"plan"}]')}`,
      { key: account.apiKey },
    );
    expect(res.status).toBe(200);
    expect(res.body.crucial_property_keys).toEqual(['plan']);
    expect(res.body.points.map((p: any) => [p.properties.plan, p.relevant_event_count])).toEqual([
      ['free', 2],
      ['pro', 1],
    ]);
  });
});
