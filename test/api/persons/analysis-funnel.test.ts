// Funnel attempts as PostHog counts them: every step-1 event in the range starts an attempt, and a
// person reaches step k when some attempt reaches steps 2..k in order within the conversion window
// of its own start.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { capture } from '../../fixtures.ts';
import { call, createAccount, startApi, type TestAccount, type TestApi } from '../../helpers.ts';

let api: TestApi;
let account: TestAccount;
const day = (d: number, h = 12) => `2026-04-${String(d).padStart(2, '0')}T${String(h).padStart(2, '0')}:00:00Z`;

beforeAll(async () => {
  api = await startApi();
  account = await createAccount(api.orm);
  await capture(api.baseUrl, account.projectToken, [
    // r1: a first signup that goes nowhere, then 20 days later a second one that converts.
    { event: 'signup', distinct_id: 'r1', timestamp: day(1) },
    { event: 'signup', distinct_id: 'r1', timestamp: day(21) },
    { event: 'activate', distinct_id: 'r1', timestamp: day(22) },
    // r2: the first attempt reaches step 2 only; a later attempt reaches step 3.
    { event: 'signup', distinct_id: 'r2', timestamp: day(1) },
    { event: 'activate', distinct_id: 'r2', timestamp: day(2) },
    { event: 'signup', distinct_id: 'r2', timestamp: day(20) },
    { event: 'activate', distinct_id: 'r2', timestamp: day(21) },
    { event: 'pay', distinct_id: 'r2', timestamp: day(22) },
    // r3: activates 16 days after its only signup: outside the 14-day window.
    { event: 'signup', distinct_id: 'r3', timestamp: day(2) },
    { event: 'activate', distinct_id: 'r3', timestamp: day(18) },
    // r4: steps out of order across attempts: pay comes before the activate of the attempt.
    { event: 'signup', distinct_id: 'r4', timestamp: day(3) },
    { event: 'pay', distinct_id: 'r4', timestamp: day(4) },
    { event: 'activate', distinct_id: 'r4', timestamp: day(5) },
    // r5: a single view: one event cannot be two steps of a [view, view] funnel.
    { event: 'view', distinct_id: 'r5', timestamp: day(3) },
    // r6: two views: a [view, view] funnel converts.
    { event: 'view', distinct_id: 'r6', timestamp: day(3) },
    { event: 'view', distinct_id: 'r6', timestamp: day(4) },
  ]);
});
afterAll(() => api.close());

const P = () => `/api/projects/${account.projectId}/persons`;
const people = (body: any) => body.results[0].people.map((p: any) => p.distinct_ids[0]).sort();
const persons = async (steps: string[], step: number, extra = '') => {
  const events = encodeURIComponent(JSON.stringify(steps.map((id, order) => ({ id, order }))));
  const res = await call(
    api.baseUrl,
    'GET',
    `${P()}/funnel/?events=${events}&date_from=2026-04-01&date_to=2026-04-30&funnel_step=${step}${extra}`,
    { key: account.apiKey },
  );
  expect(res.status).toBe(200);
  expect(res.body.results[0].count).toBe(res.body.results[0].people.length);
  return people(res.body);
};

describe('funnel attempts', () => {
  it('any step-1 event in the range may start the attempt that converts', async () => {
    const three = ['signup', 'activate', 'pay'];
    expect(await persons(three, 1)).toEqual(['r1', 'r2', 'r3', 'r4']);
    expect(await persons(three, 2)).toEqual(['r1', 'r2', 'r4']);
    expect(await persons(three, 3)).toEqual(['r2']);
    expect(await persons(three, -2)).toEqual(['r3']);
    expect(await persons(three, -3)).toEqual(['r1', 'r4']);
  });

  it('pages the persons and counts them all', async () => {
    const events = encodeURIComponent(JSON.stringify([{ id: 'signup' }, { id: 'activate' }]));
    const q = `${P()}/funnel/?events=${events}&date_from=2026-04-01&date_to=2026-04-30&funnel_step=2`;
    const first = await call(api.baseUrl, 'GET', `${q}&limit=2`, { key: account.apiKey });
    expect(first.body.results[0].count).toBe(3);
    expect(first.body.results[0].people).toHaveLength(2);
    expect(first.body.next).toContain('offset=2');
    const second = await call(api.baseUrl, 'GET', first.body.next.replace(/^https?:\/\/[^/]+/, ''), {
      key: account.apiKey,
    });
    expect(second.body.results[0].people).toHaveLength(1);
    expect(second.body.next).toBeNull();
    const seen = [...first.body.results[0].people, ...second.body.results[0].people].map((p: any) => p.distinct_ids[0]);
    expect(seen.sort()).toEqual(['r1', 'r2', 'r4']);
    const past = await call(api.baseUrl, 'GET', `${q}&limit=2&offset=10`, { key: account.apiKey });
    expect(past.body.results[0]).toEqual({ people: [], count: 3 });
  });

  it('measures the window from the start of each attempt', async () => {
    // r1's second attempt converts within a day; r2's both do; r4 activates 2 days after signing up.
    expect(await persons(['signup', 'activate'], 2, '&funnel_window_days=1')).toEqual(['r1', 'r2']);
    expect(await persons(['signup', 'activate'], 2, '&funnel_window_days=2')).toEqual(['r1', 'r2', 'r4']);
  });

  it('counts one event for one step only', async () => {
    expect(await persons(['view', 'view'], 1)).toEqual(['r5', 'r6']);
    expect(await persons(['view', 'view'], 2)).toEqual(['r6']);
  });

  it('correlation counts a converted person by any attempt', async () => {
    const events = encodeURIComponent(JSON.stringify([{ id: 'signup' }, { id: 'activate' }]));
    const entity = encodeURIComponent('{"id":"signup","type":"events"}');
    const res = await call(
      api.baseUrl,
      'GET',
      `${P()}/funnel/correlation/?events=${events}&date_from=2026-04-01&date_to=2026-04-30` +
        `&funnel_correlation_person_entity=${entity}&funnel_correlation_person_converted=true`,
      { key: account.apiKey },
    );
    expect(res.status).toBe(200);
    expect(people(res.body)).toEqual(['r1', 'r2', 'r4']);
  });
});
