// Retention metrics and the maths of mean and ratio metrics (#46) against PostHog's own test cases
// (posthog/hogql_queries/experiments/test/experiment_query_runner/test_retention_metric.py and
// test_mean_metric.py): the same events at the same times, computed through both event stores
// (PostgreSQL, and ClickHouse by chDB), must give PostHog's per-variant counts and equal results on
// both; and the daily run, continuing a stored day from the persons' stored states, must give what a
// computation from the start gives.
import type { EntityManager, MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createClickHouseEventStore, type ClickHouseEventStore } from '../../../shared/events/clickhouse.ts';
import type { EventStore } from '../../../shared/events/event-store.ts';
import { createPostgresEventStore } from '../../../shared/events/postgres.ts';
import { shipEvents } from '../../../shared/events/shipper.ts';
import { computeExperimentSeries, experimentForResults } from '../../../shared/experiments/results.ts';
import { completes, retentionComparison, retentionSpec } from '../../../shared/experiments/retention-metric.ts';
import { createExperiment } from '../../../shared/experiments/service.ts';
import { compareVariants } from '../../../shared/experiments/stats.ts';
import { initOrm } from '../../../shared/platform/db/orm.ts';
import { chdbClient, chdbDatabase } from '../../clickhouse.ts';
import { experimentRow, storedAndFull } from '../../experiment-days.ts';
import { sql } from '../../db.ts';
import { exposure, insertEvents, type Row } from '../../event-scans.ts';
import { createAccount, ownDatabase, type TestAccount } from '../../helpers.ts';
import { loadConfig } from '../../../shared/platform/config.ts';
import { logger } from '../../../shared/platform/logger.ts';
import { withPostgresSource } from '../../../shared/events/create.ts';
import { computeExperimentResults } from '../../../shared/experiments/results-job.ts';
import type { JobData } from '../../../shared/platform/jobs.ts';
import type { WorkerDeps } from '../../../worker/deps.ts';
import type { Job } from 'bullmq';

let orm: MikroORM;
let ch: ClickHouseEventStore;
let pg: EventStore;
let account: TestAccount;

beforeAll(async () => {
  orm = await initOrm(await ownDatabase('retention_metric'), 2);
  ch = createClickHouseEventStore(chdbClient(), chdbDatabase('retention'), orm);
  await ch.migrate();
  pg = createPostgresEventStore(orm, { deleteChunk: 1000 });
  account = await createAccount(orm);
});
afterAll(() => orm?.close());

interface Retention {
  start: string;
  completion: string;
  from: number;
  to: number;
  unit?: string;
  handling?: 'first_seen' | 'last_seen';
  conversionWindow?: [number, string];
}
const metric = (r: Retention) => ({
  kind: 'ExperimentMetric',
  metric_type: 'retention',
  start_event: { kind: 'EventsNode', event: r.start, math: 'total' },
  completion_event: { kind: 'EventsNode', event: r.completion, math: 'total' },
  retention_window_start: r.from,
  retention_window_end: r.to,
  retention_window_unit: r.unit ?? 'day',
  start_handling: r.handling ?? 'first_seen',
  ...(r.conversionWindow
    ? { conversion_window: r.conversionWindow[0], conversion_window_unit: r.conversionWindow[1] }
    : {}),
});

const event = (person: string, name: string, at: string): Row => ({
  person,
  distinctId: person,
  event: name,
  at: new Date(`${at}Z`),
});

/**
 * Creates the experiment (flag `flag`, started `start`), stores `rows` in PostgreSQL and ships them to
 * ClickHouse, and returns each metric's last day on both stores (which must be equal).
 */
async function both(flag: string, start: string, metrics: object[], rows: Row[], variants?: string[]) {
  const id = await createExperiment(
    orm.em.fork() as EntityManager,
    { projectId: account.projectId, organizationId: account.organizationId, userId: account.userId },
    {
      name: flag,
      feature_flag_key: flag,
      start_date: `${start}T00:00:00Z`,
      stats_config: { method: 'frequentist' },
      metrics,
      ...(variants
        ? {
            parameters: {
              feature_flag_variants: variants.map((key, i) => ({
                key,
                rollout_percentage: i
                  ? Math.floor(100 / variants.length)
                  : 100 - (variants.length - 1) * Math.floor(100 / variants.length),
              })),
            },
          }
        : {}),
    },
  );
  await insertEvents(orm, account.projectId, rows);
  await shipEvents(orm, ch, { batchSize: 500, settleSeconds: 0 });
  const row = await experimentRow(orm, id);
  const until = new Date(Date.parse(`${start}T00:00:00Z`) + 31 * 86400_000);
  const run = (store: EventStore) =>
    computeExperimentSeries(orm.em.fork() as EntityManager, store, experimentForResults(row), row.metrics, until);
  const [onPg, onCh] = [await run(pg), await run(ch)];
  expect(JSON.parse(JSON.stringify(onCh))).toEqual(JSON.parse(JSON.stringify(onPg)));
  return onPg.map((series) => {
    if (series instanceof Error) throw series;
    return series.at(-1)!;
  });
}

/** PostHog's assertion for a variant: `started` persons, `retained` of them (0/1 values, denominators 1). */
const counts = (key: string, started: number, retained: number) => ({
  key,
  number_of_samples: started,
  sum: retained,
  sum_squares: retained,
  denominator_sum: started,
  denominator_sum_squares: started,
  numerator_denominator_sum_product: retained,
});

const exposed = (flag: string, person: string, variant: string, at: string) =>
  exposure(flag, person, variant, new Date(`${at}Z`));

describe('retention metrics: PostHog test_retention_metric.py cases, on both event stores', () => {
  it('test_basic_retention_calculation: 4 of 6 and 6 of 8 return within days 1–7', async () => {
    const flag = 'ret-basic';
    const rows: Row[] = [];
    for (const [variant, signups, returns] of [
      ['control', 6, 4],
      ['test', 8, 6],
    ] as const) {
      for (let i = 0; i < 10; i++) {
        const p = `${flag}-${variant}-${i}`;
        rows.push(exposed(flag, p, variant, '2020-01-02T12:00:00'));
        if (i < signups) rows.push(event(p, 'signup', '2020-01-02T12:01:00'));
        if (i < returns) rows.push(event(p, 'login', '2020-01-05T12:00:00'));
      }
    }
    const [day] = await both(
      flag,
      '2020-01-01',
      [metric({ start: 'signup', completion: 'login', from: 1, to: 7 })],
      rows,
    );
    expect(day.baseline).toMatchObject(counts('control', 6, 4));
    expect(day.variant_results[0]).toMatchObject(counts('test', 8, 6));
  });

  it('test_retention_window_boundaries: [7, 14] days counts days 7 to 14, both included', async () => {
    const flag = 'ret-bounds';
    const rows: Row[] = [];
    const user = (variant: string, i: number, offset: number | null) => {
      const p = `${flag}-${variant}-${i}`;
      rows.push(exposed(flag, p, variant, '2024-01-02T12:00:00'));
      rows.push(event(p, 'signup', '2024-01-02T12:01:00'));
      if (offset !== null)
        rows.push(event(p, 'return_visit', `2024-01-${String(2 + offset).padStart(2, '0')}T12:01:00`));
    };
    for (const [i, o] of [5, 7, 10, 13, 14, 20, null].entries()) user('control', i, o);
    for (const [i, o] of [6, 7, 9, 12, 13, 14, null].entries()) user('test', i, o);
    const [day] = await both(
      flag,
      '2024-01-01',
      [metric({ start: 'signup', completion: 'return_visit', from: 7, to: 14 })],
      rows,
    );
    expect(day.baseline).toMatchObject(counts('control', 7, 4));
    expect(day.variant_results[0]).toMatchObject(counts('test', 7, 5));
  });

  it('test_retention_first_seen_vs_last_seen: both handlings retain all four persons', async () => {
    const flag = 'ret-seen';
    const rows: Row[] = [];
    for (const p of ['control_1', 'control_2', 'test_1', 'test_2']) {
      const person = `${flag}-${p}`;
      rows.push(exposed(flag, person, p.split('_')[0], '2024-01-02T12:00:00'));
      rows.push(event(person, 'signup', '2024-01-02T12:01:00'));
      rows.push(event(person, 'signup', '2024-01-05T12:01:00'));
      rows.push(event(person, 'purchase', '2024-01-08T12:01:00'));
    }
    const [first, last] = await both(
      flag,
      '2024-01-01',
      [
        metric({ start: 'signup', completion: 'purchase', from: 1, to: 7 }),
        metric({ start: 'signup', completion: 'purchase', from: 1, to: 7, handling: 'last_seen' }),
      ],
      rows,
    );
    for (const day of [first, last]) {
      expect(day.baseline).toMatchObject(counts('control', 2, 2));
      expect(day.variant_results[0]).toMatchObject(counts('test', 2, 2));
    }
  });

  it('test_retention_with_conversion_window: a start event later than 2 hours after exposure does not count', async () => {
    const flag = 'ret-window';
    const rows: Row[] = [];
    const user = (name: string, hours: number, returnDays: number | null) => {
      const p = `${flag}-${name}`;
      rows.push(exposed(flag, p, name.split('_')[0], '2024-01-02T12:00:00'));
      const h = Math.floor(12 + hours);
      const m = Math.round((hours % 1) * 60);
      rows.push(event(p, 'signup', `2024-01-02T${String(h).padStart(2, '0')}:${String(m).padStart(2, '0')}:00`));
      if (returnDays !== null)
        rows.push(event(p, 'return_visit', `2024-01-${String(2 + returnDays).padStart(2, '0')}T14:00:00`));
    };
    user('control_1', 1.0, 2);
    user('control_2', 1.5, 2);
    user('control_3', 3.0, 2);
    user('control_4', 0.5, null);
    user('test_1', 1.0, 2);
    user('test_2', 2.0, 2);
    user('test_3', 2.5, 2);
    const [day] = await both(
      flag,
      '2024-01-01',
      [metric({ start: 'signup', completion: 'return_visit', from: 1, to: 3, conversionWindow: [2, 'hour'] })],
      rows,
    );
    expect(day.baseline).toMatchObject(counts('control', 3, 2));
    expect(day.variant_results[0]).toMatchObject(counts('test', 2, 2));
  });

  it('test_retention_no_completion_events: 3 and 4 starters, none retained', async () => {
    const flag = 'ret-none';
    const rows: Row[] = [];
    for (const [variant, k] of [
      ['control', 3],
      ['test', 4],
    ] as const)
      for (let i = 0; i < k; i++) {
        const p = `${flag}-${variant}-${i}`;
        rows.push(exposed(flag, p, variant, '2024-01-02T12:00:00'));
        rows.push(event(p, 'signup', '2024-01-02T12:01:00'));
      }
    const [day] = await both(
      flag,
      '2024-01-01',
      [metric({ start: 'signup', completion: 'purchase', from: 1, to: 7 })],
      rows,
    );
    expect(day.baseline).toMatchObject(counts('control', 3, 0));
    expect(day.variant_results[0]).toMatchObject(counts('test', 4, 0));
  });

  it('test_retention_multiple_variants: control 3/5, test_a 3/4, test_b 5/6', async () => {
    const flag = 'ret-three';
    const rows: Row[] = [];
    for (const [variant, k, returns] of [
      ['control', 5, 3],
      ['test_a', 4, 3],
      ['test_b', 6, 5],
    ] as const)
      for (let i = 0; i < k; i++) {
        const p = `${flag}-${variant}-${i}`;
        rows.push(exposed(flag, p, variant, '2024-01-02T12:00:00'));
        rows.push(event(p, 'app_open', '2024-01-02T12:01:00'));
        if (i < returns) rows.push(event(p, 'feature_used', '2024-01-05T12:00:00'));
      }
    const [day] = await both(
      flag,
      '2024-01-01',
      [metric({ start: 'app_open', completion: 'feature_used', from: 1, to: 7 })],
      rows,
      ['control', 'test_a', 'test_b'],
    );
    expect(day.baseline).toMatchObject(counts('control', 5, 3));
    expect(day.variant_results.find((v) => v.key === 'test_a')).toMatchObject(counts('test_a', 4, 3));
    expect(day.variant_results.find((v) => v.key === 'test_b')).toMatchObject(counts('test_b', 6, 5));
  });

  it('test_retention_same_start_and_end_window: [7, 7] days counts only day 7', async () => {
    const flag = 'ret-same';
    const rows: Row[] = [];
    const logins = ['2020-01-09T12:01:00', '2020-01-09T12:01:00', '2020-01-08T12:01:00', '2020-01-10T12:01:00'];
    for (let i = 0; i < 4; i++) {
      const p = `${flag}-control-${i}`;
      rows.push(exposed(flag, p, 'control', '2020-01-02T12:00:00'));
      rows.push(event(p, 'signup', '2020-01-02T12:01:00'));
      rows.push(event(p, 'login', logins[i]));
    }
    for (let i = 0; i < 3; i++) {
      const p = `${flag}-test-${i}`;
      rows.push(exposed(flag, p, 'test', '2020-01-02T12:00:00'));
      rows.push(event(p, 'signup', '2020-01-02T12:01:00'));
      rows.push(event(p, 'login', '2020-01-09T12:01:00'));
    }
    const [day] = await both(
      flag,
      '2020-01-01',
      [metric({ start: 'signup', completion: 'login', from: 7, to: 7 })],
      rows,
    );
    expect(day.baseline).toMatchObject(counts('control', 4, 2));
    expect(day.variant_results[0]).toMatchObject(counts('test', 3, 3));
  });
});

describe('retention metrics: days, last_seen and the exposure as start', () => {
  it('a person enters on the day of their start event; last_seen takes retention back until a completion qualifies again', async () => {
    const flag = 'ret-days';
    const rows: Row[] = [
      exposed(flag, `${flag}-a`, 'control', '2024-03-01T10:00:00'),
      event(`${flag}-a`, 'signup', '2024-03-02T10:00:00'),
      event(`${flag}-a`, 'login', '2024-03-03T10:00:00'), // day 1 after the first signup: retained
      event(`${flag}-a`, 'signup', '2024-03-04T10:00:00'), // last_seen: the start moves, no return yet
      event(`${flag}-a`, 'login', '2024-03-06T10:00:00'), // day 2 after it: retained again
      exposed(flag, `${flag}-b`, 'control', '2024-03-01T10:00:00'),
      // (before the exposure: not a start)
      event(`${flag}-b`, 'signup', '2024-02-29T10:00:00'),
    ];
    const [first, last, fromExposure] = await both(
      flag,
      '2024-03-01',
      [
        metric({ start: 'signup', completion: 'login', from: 1, to: 3 }),
        metric({ start: 'signup', completion: 'login', from: 1, to: 3, handling: 'last_seen' }),
        {
          ...metric({ start: 'x', completion: 'login', from: 1, to: 1 }),
          start_event: { kind: 'ExperimentExposureNode' },
        },
      ],
      rows,
    );
    expect(first.baseline).toMatchObject(counts('control', 1, 1));
    expect(last.baseline).toMatchObject(counts('control', 1, 1));
    // From the exposure (Mar 1): a login on day 1 (Mar 2) is needed; a's logins are on days 2 and 5.
    expect(fromExposure.baseline).toMatchObject(counts('control', 2, 0));
  });

  it('the days of the series: n from the start event’s day, retained from the completion’s', async () => {
    const flag = 'ret-series';
    const p = `${flag}-a`;
    const rows: Row[] = [
      exposed(flag, p, 'control', '2024-04-01T10:00:00'),
      event(p, 'signup', '2024-04-02T10:00:00'),
      event(p, 'login', '2024-04-03T10:00:00'),
      event(p, 'signup', '2024-04-05T10:00:00'),
      event(p, 'login', '2024-04-07T10:00:00'),
    ];
    const id = await createExperiment(
      orm.em.fork() as EntityManager,
      { projectId: account.projectId, organizationId: account.organizationId, userId: account.userId },
      {
        name: flag,
        feature_flag_key: flag,
        start_date: '2024-04-01T00:00:00Z',
        metrics: [metric({ start: 'signup', completion: 'login', from: 1, to: 3, handling: 'last_seen' })],
      },
    );
    await insertEvents(orm, account.projectId, rows);
    const row = await experimentRow(orm, id);
    const [series] = await computeExperimentSeries(
      orm.em.fork() as EntityManager,
      pg,
      experimentForResults(row),
      row.metrics,
      new Date('2024-04-09T00:00:00Z'),
    );
    if (series instanceof Error) throw series;
    const byDay = series.map((d) => [d.baseline.number_of_samples, d.baseline.sum]);
    // Apr 1: exposed only; Apr 2: started; Apr 3: retained; Apr 5: a new start (not retained);
    // Apr 7: retained again (day 2 after Apr 5).
    expect(byDay).toEqual([
      [0, 0],
      [1, 0],
      [1, 1],
      [1, 1],
      [1, 0],
      [1, 0],
      [1, 1],
      [1, 1],
    ]);
  });
});

describe('retention window arithmetic', () => {
  const µ = (iso: string) => Date.parse(`${iso}Z`) * 1000;
  const spec = (from: number, to: number, unit: string) =>
    retentionSpec(metric({ start: 's', completion: 'c', from, to, unit }))!;
  it('truncates days and hours; seconds, weeks and months are exact, months by the calendar', () => {
    // Day 1 is any time on the next calendar day, even 1 minute after a 23:59 start.
    expect(completes(spec(1, 1, 'day'), µ('2024-01-01T23:59:00'), µ('2024-01-02T00:00:00'))).toBe(true);
    expect(completes(spec(1, 1, 'day'), µ('2024-01-01T00:00:00'), µ('2024-01-02T23:59:59'))).toBe(true);
    expect(completes(spec(0, 0, 'day'), µ('2024-01-01T10:00:00'), µ('2024-01-01T09:00:00'))).toBe(false);
    expect(completes(spec(1, 2, 'hour'), µ('2024-01-01T10:59:00'), µ('2024-01-01T11:00:00'))).toBe(true);
    expect(completes(spec(60, 120, 'second'), µ('2024-01-01T10:00:00'), µ('2024-01-01T10:00:59'))).toBe(false);
    expect(completes(spec(60, 120, 'second'), µ('2024-01-01T10:00:00'), µ('2024-01-01T10:02:00'))).toBe(true);
    expect(completes(spec(1, 1, 'week'), µ('2024-01-01T10:00:00'), µ('2024-01-08T10:00:00'))).toBe(true);
    expect(completes(spec(1, 1, 'month'), µ('2024-01-31T10:00:00'), µ('2024-02-29T10:00:00'))).toBe(true);
    expect(completes(spec(1, 1, 'month'), µ('2024-01-31T10:00:00'), µ('2024-02-29T10:00:01'))).toBe(false);
  });

  it('retentionComparison is the ratio statistic of 0/1 per starter, as PostHog treats retention', () => {
    const variants = [
      { key: 'control', started: 600, retained: 240 },
      { key: 'test', started: 620, retained: 280 },
    ];
    for (const method of ['frequentist', 'bayesian'] as const) {
      const ours = retentionComparison(variants, 'control', method);
      const ratio = compareVariants(
        variants.map((v) => ({
          key: v.key,
          number_of_samples: v.started,
          sum: v.retained,
          sum_squares: v.retained,
          denominator_sum: v.started,
          denominator_sum_squares: v.started,
          numerator_denominator_sum_product: v.retained,
        })),
        'control',
        'ratio',
        method,
      );
      expect(ours).toEqual(ratio);
    }
    // Frequentist by hand: p̂ and the sample variance p̂(1 − p̂)·n/(n − 1), Welch on the relative
    // effect (delta method), as for any ratio with denominators 1.
    const r = retentionComparison(variants, 'control', 'frequentist').variant_results[0] as { p_value: number };
    expect(r.p_value).toBeGreaterThan(0);
    expect(r.p_value).toBeLessThan(0.2);
  });
});

const purchases = (flag: string, person: string, variant: string, amounts: number[]): Row[] => [
  exposed(flag, person, variant, '2024-01-02T12:00:00'),
  ...amounts.map((amount, i) => ({
    ...event(person, 'purchase', `2024-01-02T12:01:${String(i).padStart(2, '0')}`),
    properties: { amount },
  })),
];
const mean = (math: string, property?: string, event = 'purchase') => ({
  kind: 'ExperimentMetric',
  metric_type: 'mean',
  source: { kind: 'EventsNode', event, math, ...(property ? { math_property: property } : {}) },
});

describe('mean metric maths: PostHog test_mean_metric.py cases, on both event stores', () => {
  it('test_property_max_metric, test_property_min_metric, test_property_avg_metric (and dau)', async () => {
    const flag = 'math-minmax';
    const rows = [
      ...purchases(flag, `${flag}-c1`, 'control', [10, 20, 30]),
      ...purchases(flag, `${flag}-c2`, 'control', [5, 15, 25]),
      ...purchases(flag, `${flag}-t1`, 'test', [50, 60, 70]),
      ...purchases(flag, `${flag}-t2`, 'test', [40, 80, 90]),
      // Exposed, never buys: 0 for every math (PostHog's LEFT JOIN), so n = 3 here.
      exposed(flag, `${flag}-c3`, 'control', '2024-01-02T12:00:00'),
      exposed(flag, `${flag}-t3`, 'test', '2024-01-02T12:00:00'),
    ];
    const [max, min, avg, dau, avgCount] = await both(
      flag,
      '2024-01-01',
      [mean('max', 'amount'), mean('min', 'amount'), mean('avg', 'amount'), mean('dau'), mean('avg')],
      rows,
    );
    const sums = (day: typeof max) => [day.baseline.sum, day.variant_results[0].sum];
    expect(sums(max)).toEqual([55, 160]);
    expect(sums(min)).toEqual([15, 90]);
    expect(sums(avg)).toEqual([35, 130]);
    expect(max.baseline).toMatchObject({ number_of_samples: 3, sum_squares: 30 ** 2 + 25 ** 2 });
    expect(avg.variant_results[0]).toMatchObject({ number_of_samples: 3, sum_squares: 60 ** 2 + 70 ** 2 });
    // dau: count(distinct person_id) of the person's events, 1 for a buyer.
    expect(sums(dau)).toEqual([2, 2]);
    // avg without a property: each event is 1.
    expect(sums(avgCount)).toEqual([2, 2]);
  });

  it('test_unique_sessions_math_type: distinct non-empty $session_id per person (3 and 5)', async () => {
    const flag = 'math-sessions';
    const rows: Row[] = [];
    const user = (person: string, variant: string, count: number, session: string) => {
      rows.push({
        ...exposed(flag, `${flag}-${person}`, variant, '2024-01-02T12:00:00'),
        properties: { $feature_flag: flag, $feature_flag_response: variant, $session_id: session },
      });
      for (let i = 0; i < count; i++)
        rows.push({
          ...event(`${flag}-${person}`, '$pageview', `2024-01-02T12:01:${String(i).padStart(2, '0')}`),
          properties: { $session_id: session },
        });
    };
    user('control_1', 'control', 3, 'c_1_a');
    user('control_1', 'control', 3, 'c_1_b');
    user('control_2', 'control', 3, 'c_2_a');
    user('control_3', 'control', 0, 'c_3_a');
    user('test_1', 'test', 3, 't_1_a');
    user('test_1', 'test', 3, 't_1_b');
    user('test_2', 'test', 3, 't_2_a');
    user('test_2', 'test', 3, 't_2_b');
    user('test_2', 'test', 3, 't_2_c');
    // (A pageview without a session, and one with an empty one, count no session.)
    rows.push(event(`${flag}-test_2`, '$pageview', '2024-01-02T13:00:00'));
    rows.push({ ...event(`${flag}-test_2`, '$pageview', '2024-01-02T13:00:01'), properties: { $session_id: '' } });
    const [day] = await both(flag, '2024-01-01', [mean('unique_session', undefined, '$pageview')], rows);
    expect(day.baseline).toMatchObject({ number_of_samples: 3, sum: 3 });
    expect(day.variant_results[0]).toMatchObject({ number_of_samples: 2, sum: 5 });
  });

  it('a ratio of an average to distinct sessions: per person avg(amount) over sessions (by hand)', async () => {
    const flag = 'math-ratio';
    const rows: Row[] = [
      ...purchases(flag, `${flag}-c1`, 'control', [10, 30]),
      ...purchases(flag, `${flag}-t1`, 'test', [40]),
    ].map((r) =>
      r.event === 'purchase' ? { ...r, properties: { ...r.properties, $session_id: r.at.toISOString() } } : r,
    );
    const [day] = await both(
      flag,
      '2024-01-01',
      [
        {
          kind: 'ExperimentMetric',
          metric_type: 'ratio',
          numerator: { kind: 'EventsNode', event: 'purchase', math: 'avg', math_property: 'amount' },
          denominator: { kind: 'EventsNode', event: 'purchase', math: 'unique_session' },
        },
      ],
      rows,
    );
    expect(day.baseline).toMatchObject({ sum: 20, denominator_sum: 2, numerator_denominator_sum_product: 40 });
    expect(day.variant_results[0]).toMatchObject({
      sum: 40,
      denominator_sum: 1,
      numerator_denominator_sum_product: 40,
    });
  });
});

describe('the daily run continues the new kinds from a stored day, on both event stores', () => {
  it('equals a computation from the start: retention (first_seen, last_seen), avg, min, max, dau, unique_session, ratio of them', async () => {
    const DAY = 86400_000;
    const today = Date.UTC(new Date().getUTCFullYear(), new Date().getUTCMonth(), new Date().getUTCDate());
    const at = (offset: number, hours: number) => new Date(today + offset * DAY + hours * 3600_000);
    const flag = 'kinds-daily';
    const metrics = [
      metric({ start: 'signup', completion: 'purchase', from: 0, to: 1 }),
      metric({ start: 'signup', completion: 'purchase', from: 1, to: 2, handling: 'last_seen' }),
      mean('avg', 'amount'),
      mean('min', 'amount'),
      mean('max', 'amount'),
      mean('dau'),
      mean('unique_session'),
      {
        kind: 'ExperimentMetric',
        metric_type: 'ratio',
        numerator: { kind: 'EventsNode', event: 'purchase', math: 'max', math_property: 'amount' },
        denominator: { kind: 'EventsNode', event: 'purchase', math: 'unique_session' },
      },
    ];
    const id = await createExperiment(
      orm.em.fork() as EntityManager,
      { projectId: account.projectId, organizationId: account.organizationId, userId: account.userId },
      { name: flag, feature_flag_key: flag, start_date: at(-3, 0).toISOString(), metrics },
    );
    const rows: Row[] = [];
    for (let i = 0; i < 16; i++) {
      const p = `${flag}-${i}`;
      const variant = i % 2 ? 'test' : 'control';
      rows.push(exposure(flag, p, variant, at(-3, 1 + (i % 3))));
      if (i % 4 !== 3) rows.push({ person: p, distinctId: p, event: 'signup', at: at(-3 + (i % 2), 5) });
      for (let k = 0; k < 1 + (i % 3); k++)
        rows.push({
          person: p,
          distinctId: p,
          event: 'purchase',
          at: at(-3 + k, 8 + i / 4),
          properties: { amount: 5 + ((i * 7 + k * 3) % 11), $session_id: `s-${i}-${k % 2}` },
        });
      if (i % 5 === 0) rows.push({ person: p, distinctId: p, event: 'signup', at: at(-1, 2) });
    }
    await insertEvents(orm, account.projectId, rows);
    await shipEvents(orm, ch, { batchSize: 500, settleSeconds: 0 });
    const job = { data: { experimentId: id } } as Job<JobData['experimentResults']>;
    for (const store of ['postgres', 'clickhouse'] as const) {
      const deps = {
        config: loadConfig(),
        orm,
        events: store === 'postgres' ? pg : withPostgresSource(pg, ch, orm),
        logger,
      } as unknown as WorkerDeps;
      await sql(orm, `delete from experiment_metric_result where experiment_id = ?`, [id]);
      // Days −3 and −2 computed from the start (and the persons' states as of day −2's end) …
      expect(await computeExperimentResults(job, deps, at(-1, 0.5))).toMatchObject({ full: 1 });
      // (As the next day's run would find them: days −3 and −2 computed after they ended.)
      await sql(orm, `update experiment_metric_result set computed_at = now() where experiment_id = ? and day < ?`, [
        id,
        at(-1, 0).toISOString().slice(0, 10),
      ]);
      // … then continued from day −2 with the events since.
      const now = new Date();
      expect(await computeExperimentResults(job, deps, now)).toMatchObject({ incremental: 1, full: 0 });
      const { full, days } = await storedAndFull(orm, pg, id, now);
      for (const [i, mine] of days.entries()) {
        expect(mine.length).toBe(4); // days −3 to today
        expect(mine, `${store}: metric ${i}`).toEqual(full[i]);
      }
      // Some persons are counted and retained, so the comparison is not of zeros.
      expect(full[0]).not.toBeInstanceOf(Error);
      const last = (full[0] as { baseline: { number_of_samples: number; sum: number } }[]).at(-1)!;
      expect(last.baseline.number_of_samples).toBeGreaterThan(0);
      expect(last.baseline.sum).toBeGreaterThan(0);
    }
  });
});
