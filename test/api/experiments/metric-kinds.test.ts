// Retention metrics and the other maths of mean and ratio metrics (#46) through the API: created in
// metrics, metrics_secondary and saved metrics (400s, in PostHog's error body, for shapes the engine
// cannot compute), events captured by /batch, results computed by the worker's job on the
// PostgreSQL event store and on the ClickHouse one (chDB, after shipping), and read back from
// timeseries_results: the same answers from both stores.
import type { Job } from 'bullmq';
import { describe, expect, it } from 'vitest';
import { createClickHouseEventStore } from '../../../shared/events/clickhouse.ts';
import { withPostgresSource } from '../../../shared/events/create.ts';
import { shipEvents } from '../../../shared/events/shipper.ts';
import { computeExperimentResults } from '../../../shared/experiments/results-job.ts';
import type { JobData } from '../../../shared/platform/jobs.ts';
import type { WorkerDeps } from '../../../worker/deps.ts';
import { chdbClient, chdbDatabase } from '../../clickhouse.ts';
import { sql } from '../../db.ts';
import { capture, type SeedEvent } from '../../fixtures.ts';
import { apiAndWorker, call, ownDatabase } from '../../helpers.ts';

const {
  api,
  worker,
  accounts: [account],
} = await apiAndWorker({ database: await ownDatabase('metric_kinds_api') });

const P = () => `/api/projects/${account.projectId}`;
const post = (path: string, body: unknown) => call(api.baseUrl, 'POST', `${P()}${path}`, { key: account.apiKey, body });

const retention = {
  kind: 'ExperimentMetric',
  metric_type: 'retention',
  start_event: { kind: 'EventsNode', event: 'signup', math: 'total' },
  completion_event: { kind: 'EventsNode', event: 'login', math: 'total' },
  retention_window_start: 1,
  retention_window_end: 3,
  retention_window_unit: 'day',
  start_handling: 'first_seen',
};
const avgOrder = {
  kind: 'ExperimentMetric',
  metric_type: 'mean',
  source: { kind: 'EventsNode', event: 'purchase', math: 'avg', math_property: 'amount' },
};
const perSession = {
  kind: 'ExperimentMetric',
  metric_type: 'ratio',
  numerator: { kind: 'EventsNode', event: 'purchase', math: 'max', math_property: 'amount' },
  denominator: { kind: 'EventsNode', event: 'purchase', math: 'unique_session' },
};

describe('retention metrics and metric maths through the API, on both event stores', () => {
  it('computes them from captured events, the same on PostgreSQL and ClickHouse', async () => {
    const today = new Date();
    const dayStart = (offset: number) =>
      new Date(Date.UTC(today.getUTCFullYear(), today.getUTCMonth(), today.getUTCDate() + offset));
    const at = (offset: number, hour: number) => new Date(dayStart(offset).getTime() + hour * 3600_000).toISOString();
    const created = await post('/experiments/', {
      name: 'Retention',
      feature_flag_key: 'retention-api',
      start_date: dayStart(-3).toISOString(),
      stats_config: { method: 'frequentist' },
      metrics: [retention, avgOrder],
      metrics_secondary: [perSession],
    });
    expect(created.status).toBe(201);
    const exp = created.body;
    expect(exp.metrics[0]).toMatchObject({ ...retention, uuid: expect.any(String), fingerprint: expect.any(String) });
    expect(exp.metrics_secondary[0]).toMatchObject(perSession);

    const events: SeedEvent[] = [];
    for (const [variant, persons, starters, returners] of [
      ['control', 10, 8, 2],
      ['test', 10, 6, 5],
    ] as const)
      for (let i = 0; i < persons; i++) {
        const id = `ret-${variant}-${i}`;
        events.push({
          event: '$feature_flag_called',
          distinct_id: id,
          timestamp: at(-3, 1),
          properties: { $feature_flag: 'retention-api', $feature_flag_response: variant },
        });
        if (i < starters) events.push({ event: 'signup', distinct_id: id, timestamp: at(-3, 2) });
        // Returners log in two days later (in the window); the others the same day (too early).
        events.push({ event: 'login', distinct_id: id, timestamp: at(i < returners ? -1 : -3, 5) });
        for (let k = 0; k <= i % 3; k++)
          events.push({
            event: 'purchase',
            distinct_id: id,
            timestamp: at(-3 + k, 6),
            properties: { amount: 10 * (k + 1) + (variant === 'test' ? 5 : 0), $session_id: `${id}-${k % 2}` },
          });
      }
    await capture(api.baseUrl, account.projectToken, events);

    const job = { data: { experimentId: exp.id } } as Job<JobData['experimentResults']>;
    const read = async () => {
      const out = [];
      for (const m of [...exp.metrics, ...exp.metrics_secondary]) {
        const res = await call(
          api.baseUrl,
          'GET',
          `${P()}/experiments/${exp.id}/timeseries_results/?metric_uuid=${m.uuid}&fingerprint=${m.fingerprint}`,
          { key: account.apiKey },
        );
        expect(res.status).toBe(200);
        out.push(Object.fromEntries(Object.entries(res.body.timeseries).map(([day, r]) => [day, r])));
      }
      return out;
    };
    const now = new Date();
    expect(await computeExperimentResults(job, worker.deps, now)).toMatchObject({ full: 1 });
    const onPostgres = await read();

    const yesterday = onPostgres[0][dayStart(-1).toISOString().slice(0, 10)] as Record<string, any>;
    expect(yesterday.baseline).toMatchObject({ key: 'control', number_of_samples: 8, sum: 2, denominator_sum: 8 });
    expect(yesterday.variant_results[0]).toMatchObject({
      key: 'test',
      number_of_samples: 6,
      sum: 5,
      denominator_sum: 6,
      numerator_denominator_sum_product: 5,
      p_value: null, // fewer than 50 starters per variant: PostHog withholds the test
      validation_failures: ['NOT_ENOUGH_EXPOSURES'],
    });
    // The day before the returns: started, none retained yet.
    expect(onPostgres[0][dayStart(-3).toISOString().slice(0, 10)]).toMatchObject({
      baseline: { number_of_samples: 8, sum: 0 },
    });
    // avg(amount) per person: control persons buy 10; 10, 20; 10, 20, 30 (i % 3) → 10, 15, 20.
    const avgDay = onPostgres[1][dayStart(-1).toISOString().slice(0, 10)] as Record<string, any>;
    expect(avgDay.baseline.sum).toBe(4 * 10 + 3 * 15 + 3 * 20);
    const ratioDay = onPostgres[2][dayStart(-1).toISOString().slice(0, 10)] as Record<string, any>;
    // max(amount) over distinct sessions: sessions 1, 2, 2 (k % 2) for 1, 2, 3 purchases.
    expect(ratioDay.baseline).toMatchObject({ sum: 4 * 10 + 3 * 20 + 3 * 30, denominator_sum: 4 + 3 * 2 + 3 * 2 });

    // The same events in ClickHouse, the same job on the ClickHouse store: the same answers.
    const ch = createClickHouseEventStore(chdbClient(), chdbDatabase('kinds_api'), api.orm);
    await ch.migrate();
    await shipEvents(api.orm, ch, { batchSize: 500, settleSeconds: 0 });
    await sql(api.orm, 'delete from experiment_metric_result where experiment_id = ?', [exp.id]);
    const onClickHouse = { ...worker.deps, events: withPostgresSource(worker.deps.events, ch, api.orm) } as WorkerDeps;
    expect(await computeExperimentResults(job, onClickHouse, now)).toMatchObject({ full: 1 });
    const strip = (list: Record<string, any>[]) =>
      list.map((series) =>
        Object.fromEntries(Object.entries(series).map(([day, r]) => [day, { ...r, computed_at: undefined }])),
      );
    expect(strip(await read())).toEqual(strip(onPostgres));
  });

  it('refuses retention metrics and maths it cannot compute, in metrics, metrics_secondary and saved metrics', async () => {
    const bad: [unknown, string][] = [
      [{ ...retention, completion_event: undefined }, 'A retention metric needs a completion_event: an EventsNode.'],
      [
        { ...retention, start_event: { kind: 'ActionsNode', id: 1 } },
        'must be an EventsNode or ExperimentExposureNode',
      ],
      [{ ...retention, retention_window_unit: 'fortnight' }, 'retention_window_unit must be one of'],
      [{ ...retention, retention_window_start: 5, retention_window_end: 2 }, 'retention_window_end must be'],
      [{ ...retention, retention_window_start: 1.5 }, 'retention_window_start must be an integer'],
      [{ ...retention, start_handling: 'sometimes' }, 'start_handling must be first_seen or last_seen.'],
      [{ ...retention, conversion_window: 2 }, 'conversion_window_unit must be one of'],
      [
        { ...retention, start_event: { kind: 'ExperimentExposureNode' }, start_handling: 'last_seen' },
        'starts at the exposure takes neither',
      ],
      [
        { ...retention, completion_event: { kind: 'EventsNode', event: 'login', properties: [{ key: 'x' }] } },
        'property filters, which are not supported',
      ],
      [
        { ...avgOrder, source: { kind: 'EventsNode', event: 'purchase', math: 'hogql', math_hogql: 'sum(1)' } },
        'math hogql (a HogQL expression) is not supported',
      ],
      [
        { ...avgOrder, source: { kind: 'EventsNode', event: 'purchase', math: 'unique_group' } },
        'math unique_group (distinct groups) is not supported',
      ],
      [
        { ...avgOrder, source: { kind: 'EventsNode', event: 'purchase', math: 'median' } },
        "The mean metric's source math must be one of total, sum, avg, min, max, dau, unique_session.",
      ],
      [
        { ...avgOrder, source: { kind: 'EventsNode', event: 'purchase', math: 'sum' } },
        "The mean metric's source sums a property: set its math_property.",
      ],
      [
        { ...perSession, denominator: { kind: 'EventsNode', event: 'purchase', math: 'hogql' } },
        "The ratio metric's denominator: math hogql",
      ],
    ];
    let n = 0;
    for (const [metric, detail] of bad) {
      for (const list of ['metrics', 'metrics_secondary'] as const) {
        const res = await post('/experiments/', {
          name: 'Bad',
          feature_flag_key: `bad-kind-${n++}`,
          [list]: [metric],
        });
        expect(res.status, JSON.stringify(metric)).toBe(400);
        expect(res.body).toMatchObject({ type: 'validation_error', code: 'invalid_input', attr: list });
        expect(res.body.detail).toContain(detail);
      }
      const saved = await post('/experiment_saved_metrics/', { name: 'Bad', query: metric });
      expect(saved.status).toBe(400);
      expect(saved.body).toMatchObject({ type: 'validation_error', attr: 'query' });
      expect(saved.body.detail).toContain(detail);
    }
    // And saved metrics take the good ones.
    for (const query of [retention, avgOrder, perSession]) {
      const saved = await post('/experiment_saved_metrics/', { name: 'Good', query });
      expect(saved.status).toBe(201);
      expect(saved.body.query).toMatchObject(query);
    }
  });
});
