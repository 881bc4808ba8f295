import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { capture } from '../../fixtures.ts';
import { call, createAccount, startApi, type TestAccount, type TestApi } from '../../helpers.ts';

let api: TestApi;
let account: TestAccount;
let other: TestAccount;
const P = () => `/api/projects/${account.projectId}/experiments`;
const post = (path: string, body: unknown) => call(api.baseUrl, 'POST', path, { key: account.apiKey, body });
const patch = (id: number, body: unknown) => call(api.baseUrl, 'PATCH', `${P()}/${id}/`, { key: account.apiKey, body });
const get = (id: number) => call(api.baseUrl, 'GET', `${P()}/${id}/`, { key: account.apiKey });

beforeAll(async () => {
  api = await startApi();
  account = await createAccount(api.orm);
  other = await createAccount(api.orm);
});
afterAll(() => api.close());

const FIELDS = [
  'id',
  'name',
  'description',
  'start_date',
  'end_date',
  'feature_flag_key',
  'feature_flag',
  'holdout',
  'holdout_id',
  'exposure_cohort',
  'parameters',
  'secondary_metrics',
  'saved_metrics_ids',
  'saved_metrics',
  'filters',
  'archived',
  'deleted',
  'created_by',
  'created_at',
  'updated_at',
  'type',
  'exposure_criteria',
  'metrics',
  'metrics_secondary',
  'stats_config',
  'guardrail_status', // ours, not PostHog's: the guardrail check and circuit breaker (README, Guardrails)
  'conclusion',
  'conclusion_comment',
  'primary_metrics_ordered_uuids',
  'secondary_metrics_ordered_uuids',
  'user_access_level',
];

describe('create, retrieve, list', () => {
  it('creates with name + feature_flag_key: PostHog’s field set, a new inactive flag with control/test, bayesian stats', async () => {
    const res = await post(`${P()}/`, { name: 'Checkout test', feature_flag_key: 'checkout-test' });
    expect(res.status).toBe(201);
    expect(Object.keys(res.body)).toEqual(FIELDS);
    // Read back as written, never null: PostHog's agent toolkit requires the key, a generated type one shape.
    expect(res.body.saved_metrics_ids).toEqual([]);
    expect(res.body.feature_flag).toMatchObject({
      key: 'checkout-test',
      name: 'Feature Flag for Experiment Checkout test',
      active: false,
      deleted: false,
      version: 1,
      team_id: account.projectId,
    });
    expect(res.body.feature_flag.filters.multivariate.variants.map((v: any) => v.key)).toEqual(['control', 'test']);
    expect(res.body.feature_flag.filters.groups).toEqual([{ properties: [], rollout_percentage: 100 }]);
    expect(res.body.stats_config).toEqual({ method: 'bayesian' });
    expect(res.body.created_by).toMatchObject({ id: account.userId });
    expect(Object.keys(res.body.created_by).sort()).toEqual([
      'distinct_id',
      'email',
      'first_name',
      'hedgehog_config',
      'id',
      'is_email_verified',
      'last_name',
      'role_at_organization',
      'uuid',
    ]);
    expect(res.body.created_at).toMatch(/Z$/);
    expect((await get(res.body.id)).body).toEqual(res.body);
  });

  it('validates as PostHog does', async () => {
    const cases: [unknown, string][] = [
      [{ name: null, feature_flag_key: 'a' }, 'This field may not be null.'],
      [{ feature_flag_key: 'a' }, 'This field is required.'],
      [{ name: 'x' }, 'This field is required.'],
      [
        { name: 'x', feature_flag_key: 'bad key!' },
        'Only letters, numbers, hyphens (-) & underscores (_) are allowed.',
      ],
      [
        { name: 'x', feature_flag_key: 'k1', start_date: '2026-01-02T00:00:00Z', end_date: '2026-01-01T00:00:00Z' },
        'End date must be after start date',
      ],
      [
        {
          name: 'x',
          feature_flag_key: 'k2',
          parameters: {
            feature_flag_variants: [
              { key: 'a', rollout_percentage: 50 },
              { key: 'b', rollout_percentage: 50 },
            ],
          },
        },
        'Feature flag variants must contain a control variant',
      ],
      [
        { name: 'x', feature_flag_key: 'k3', saved_metrics_ids: [{ id: 999999 }] },
        'Saved metric does not exist or does not belong to this project',
      ],
      [{ name: 'x', feature_flag_key: 'k4', holdout_id: 123456 }, 'Invalid pk "123456" - object does not exist.'],
      [{ name: 'x', feature_flag_key: 'k5', type: 'other' }, '"other" is not a valid choice.'],
    ];
    for (const [body, detail] of cases) {
      const res = await post(`${P()}/`, body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.body.detail).toBe(detail);
    }
  });

  it('reuses an existing flag with the same key; several experiments may share it', async () => {
    const a = await post(`${P()}/`, { name: 'A', feature_flag_key: 'shared-flag' });
    const b = await post(`${P()}/`, { name: 'B', feature_flag_key: 'shared-flag' });
    expect(b.status).toBe(201);
    expect(b.body.feature_flag.id).toBe(a.body.feature_flag.id);
  });

  it('lists newest first, hides archived unless asked, filters status and search', async () => {
    const mine = await createAccount(api.orm);
    const mk = async (name: string, extra = {}) =>
      (
        await call(api.baseUrl, 'POST', `/api/projects/${mine.projectId}/experiments/`, {
          key: mine.apiKey,
          body: { name, feature_flag_key: name.toLowerCase(), ...extra },
        })
      ).body;
    await mk('Draft');
    const running = await mk('Running', { start_date: '2026-01-01T00:00:00Z' });
    await mk('Done', { start_date: '2026-01-01T00:00:00Z', end_date: '2026-01-05T00:00:00Z' });
    const archived = await mk('Archived');
    await call(api.baseUrl, 'PATCH', `/api/projects/${mine.projectId}/experiments/${archived.id}/`, {
      key: mine.apiKey,
      body: { archived: true },
    });
    const names = async (q: string) =>
      (
        await call(api.baseUrl, 'GET', `/api/projects/${mine.projectId}/experiments/${q}`, { key: mine.apiKey })
      ).body.results.map((e: any) => e.name);
    expect(await names('')).toEqual(['Done', 'Running', 'Draft']);
    expect(await names('?archived=true')).toEqual(['Archived']);
    expect(await names('?status=running')).toEqual(['Running']);
    expect(await names('?status=draft')).toEqual(['Draft']);
    expect(await names('?status=complete')).toEqual(['Done']);
    expect(await names('?search=RUN')).toEqual(['Running']);
    expect(await names('?order=name')).toEqual(['Done', 'Draft', 'Running']);
    expect(
      (
        await call(api.baseUrl, 'GET', `/api/projects/${mine.projectId}/experiments/?order=id;drop`, {
          key: mine.apiKey,
        })
      ).status,
    ).toBe(400);
    expect(running.feature_flag.active).toBe(true); // created already launched
  });
});

describe('update lifecycle', () => {
  it('keeps the flag inactive in draft, activates it on launch, then freezes variants', async () => {
    const exp = (await post(`${P()}/`, { name: 'Life', feature_flag_key: 'life' })).body;
    const variants = [
      { key: 'control', rollout_percentage: 34 },
      { key: 'test', rollout_percentage: 33 },
      { key: 'test-2', rollout_percentage: 33 },
    ];
    const draft = await patch(exp.id, { parameters: { feature_flag_variants: variants } });
    expect(draft.body.feature_flag.filters.multivariate.variants.map((v: any) => v.key)).toEqual([
      'control',
      'test',
      'test-2',
    ]);
    expect(draft.body.feature_flag.active).toBe(false);
    const launched = await patch(exp.id, { start_date: '2026-02-01T00:00:00Z' });
    expect(launched.body.feature_flag.active).toBe(true);
    expect(launched.body.feature_flag.version).toBeGreaterThan(exp.feature_flag.version);
    const frozen = await patch(exp.id, { parameters: { feature_flag_variants: variants.slice(0, 2) } });
    expect(frozen.status).toBe(400);
    expect(frozen.body.detail).toBe("Can't update feature_flag_variants on Experiment");
    const rollout = await patch(exp.id, {
      parameters: { feature_flag_variants: variants.map((v) => ({ ...v, rollout_percentage: 10 })) },
    });
    expect(rollout.status).toBe(200);
  });

  it('rejects keys that cannot change, a new flag key, and global filter properties', async () => {
    const exp = (await post(`${P()}/`, { name: 'Keys', feature_flag_key: 'keys' })).body;
    // A draft's type and feature_flag_key are writable (seed): see draft-type-and-flag-key.test.ts.
    expect((await patch(exp.id, { type: 'web', feature_flag: {}, created_at: 'x' })).body.detail).toBe(
      "Can't update keys: created_at, feature_flag on Experiment",
    );
    expect((await patch(exp.id, { feature_flag_key: 'keys', description: 'same key is fine' })).status).toBe(200);
    expect((await patch(exp.id, { filters: { properties: [{ key: 'a' }] } })).body.detail).toBe(
      'Experiments do not support global filter properties',
    );
  });

  it("accepts PUT as a full update: name and feature_flag_key required, then PATCH's rules", async () => {
    const metric = (
      await post(`/api/projects/${account.projectId}/experiment_saved_metrics/`, {
        name: 'Put metric',
        query: { kind: 'ExperimentMetric', metric_type: 'mean', source: { kind: 'EventsNode', event: 'x' } },
      })
    ).body;
    const exp = (
      await post(`${P()}/`, {
        name: 'Put',
        feature_flag_key: 'put',
        description: 'kept',
        saved_metrics_ids: [{ id: metric.id }],
      })
    ).body;
    const put = (body: unknown) => call(api.baseUrl, 'PUT', `${P()}/${exp.id}/`, { key: account.apiKey, body });
    for (const [body, attr] of [
      [{ feature_flag_key: 'put', description: 'x' }, 'name'],
      [{ name: 'Put 2' }, 'feature_flag_key'],
      [{}, 'name'],
    ] as const) {
      const res = await put(body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.body).toEqual({ type: 'validation_error', code: 'required', detail: 'This field is required.', attr });
    }
    expect((await put({ name: null, feature_flag_key: 'put' })).body).toMatchObject({ code: 'null', attr: 'name' });
    const res = await put({ name: 'Put 2', feature_flag_key: 'put', end_date: '2026-05-01T00:00:00Z' });
    expect(res.status).toBe(200);
    expect(Object.keys(res.body)).toEqual(FIELDS);
    // Fields left out keep their values, as DRF's full update leaves them (saved metrics included).
    expect(res.body).toMatchObject({ name: 'Put 2', description: 'kept', end_date: '2026-05-01T00:00:00Z' });
    expect(res.body.saved_metrics.map((l: any) => l.saved_metric)).toEqual([metric.id]);
    expect(res.body.saved_metrics_ids).toEqual([{ id: metric.id, metadata: {} }]);
    expect((await get(exp.id)).body).toEqual(res.body);
    expect((await put({ name: 'Put', feature_flag_key: 'put', created_at: 'x' })).body.detail).toBe(
      "Can't update keys: created_at on Experiment",
    );
    const unknown = await call(api.baseUrl, 'PUT', `${P()}/999999999/`, {
      key: account.apiKey,
      body: { name: 'x', feature_flag_key: 'x' },
    });
    expect(unknown.status).toBe(404);
  });

  it('soft-deletes with deleted: true; DELETE is 405 with no body', async () => {
    const exp = (await post(`${P()}/`, { name: 'Gone', feature_flag_key: 'gone' })).body;
    const del = await call(api.baseUrl, 'DELETE', `${P()}/${exp.id}/`, { key: account.apiKey });
    expect(del.status).toBe(405);
    expect(del.text).toBe('');
    expect((await get(exp.id)).status).toBe(200);
    expect((await patch(exp.id, { deleted: true })).status).toBe(200);
    expect((await get(exp.id)).status).toBe(404);
    const list = (await call(api.baseUrl, 'GET', `${P()}/?limit=1000`, { key: account.apiKey })).body.results.map(
      (e: any) => e.id,
    );
    expect(list).not.toContain(exp.id);
  });

  it('fingerprints metrics, changing when the start date changes', async () => {
    const metric = { kind: 'ExperimentMetric', metric_type: 'mean', source: { kind: 'EventsNode', event: 'purchase' } };
    const exp = (await post(`${P()}/`, { name: 'Metrics', feature_flag_key: 'metrics', metrics: [metric] })).body;
    expect(exp.metrics[0].fingerprint).toMatch(/^[0-9a-f]{64}$/);
    expect(exp.primary_metrics_ordered_uuids).toEqual([exp.metrics[0].uuid]);
    const moved = (await patch(exp.id, { start_date: '2026-03-01T00:00:00Z' })).body;
    expect(moved.metrics[0].uuid).toBe(exp.metrics[0].uuid);
    expect(moved.metrics[0].fingerprint).not.toBe(exp.metrics[0].fingerprint);
  });
});

describe('stats_config: multiple-comparison correction and CUPED', () => {
  const metric = { kind: 'ExperimentMetric', metric_type: 'mean', source: { kind: 'EventsNode', event: 'purchase' } };
  const frequentist = (correction: unknown) => ({ method: 'frequentist', multiple_comparison_correction: correction });

  it('rejects an unknown correction method, scope, share or field with PostHog’s 400 body', async () => {
    const cases: [unknown, Record<string, unknown>][] = [
      [
        frequentist({ method: 'bonferoni' }),
        {
          type: 'validation_error',
          code: 'invalid_choice',
          detail: '"bonferoni" is not a valid choice.',
          attr: 'stats_config__multiple_comparison_correction__method',
        },
      ],
      [
        frequentist({ scope: 'metric' }),
        { code: 'required', attr: 'stats_config__multiple_comparison_correction__method' },
      ],
      [
        frequentist({ method: 'holm', scope: 'variant' }),
        { code: 'invalid_choice', attr: 'stats_config__multiple_comparison_correction__scope' },
      ],
      [
        frequentist({ method: 'preferential_bonferroni', primary_alpha_share: 1 }),
        {
          detail: 'Ensure this value is less than 1.',
          attr: 'stats_config__multiple_comparison_correction__primary_alpha_share',
        },
      ],
      [
        frequentist({ method: 'holm', alpha: 0.1 }),
        { detail: 'Unknown field "alpha".', attr: 'stats_config__multiple_comparison_correction__alpha' },
      ],
      [frequentist('holm'), { code: 'not_a_dict', attr: 'stats_config__multiple_comparison_correction' }],
      [
        { method: 'frequentist', cuped: { enabled: true, lookback_days: 31 } },
        { detail: 'Ensure this value is less than or equal to 30.', attr: 'stats_config__cuped__lookback_days' },
      ],
      [
        { method: 'frequentist', cuped: { enabled: true, lookback_days: 0 } },
        { code: 'min_value', attr: 'stats_config__cuped__lookback_days' },
      ],
      [
        { method: 'frequentist', cuped: { enabled: 'yes' } },
        { detail: 'Must be a valid boolean.', attr: 'stats_config__cuped__enabled' },
      ],
      [
        { cuped: { enabled: true, window: 7 } },
        { detail: 'Unknown field "window".', attr: 'stats_config__cuped__window' },
      ],
      [
        { sequential: { enabled: true } },
        {
          detail: 'Sequential testing applies to the frequentist method only; set stats_config.method to frequentist.',
          attr: 'stats_config__sequential',
        },
      ],
      [
        { method: 'bayesian', sequential: { enabled: true, tuning_parameter: 5000 } },
        { attr: 'stats_config__sequential' },
      ],
      [
        { method: 'frequentist', sequential: { enabled: true, tuning_parameter: 10 } },
        { code: 'min_value', attr: 'stats_config__sequential__tuning_parameter' },
      ],
      [
        { method: 'frequentist', sequential: { enabled: true, tuning_parameter: 5000.5 } },
        { attr: 'stats_config__sequential__tuning_parameter' },
      ],
      [
        { method: 'frequentist', sequential: { enabled: true, rho: 0.1 } },
        { detail: 'Unknown field "rho".', attr: 'stats_config__sequential__rho' },
      ],
      [
        { method: 'frequentist', sequential: true },
        { code: 'not_a_dict', attr: 'stats_config__sequential' },
      ],
      [
        { multiple_comparison_correction: { method: 'holm' } },
        {
          detail:
            'A multiple-comparison correction applies to the frequentist method only; set stats_config.method to frequentist.',
          attr: 'stats_config__multiple_comparison_correction',
        },
      ],
    ];
    const exp = (await post(`${P()}/`, { name: 'Corrected', feature_flag_key: 'corrected-bad' })).body;
    for (const [stats_config, body] of cases) {
      const created = await post(`${P()}/`, { name: 'x', feature_flag_key: 'corrected-bad-2', stats_config });
      expect(created.status, JSON.stringify(stats_config)).toBe(400);
      expect(created.body).toMatchObject({ type: 'validation_error', ...body });
      const patched = await patch(exp.id, { stats_config });
      expect(patched.status, JSON.stringify(stats_config)).toBe(400);
      expect(patched.body).toMatchObject(body);
    }
    expect((await get(exp.id)).body.stats_config).toEqual({ method: 'bayesian' });
  });

  it('sequential testing: stored when valid, refused for ratio and retention metrics, and it changes the fingerprints', async () => {
    const sequential = { method: 'frequentist', sequential: { enabled: true } };
    const ratio = {
      kind: 'ExperimentMetric',
      metric_type: 'ratio',
      numerator: { kind: 'EventsNode', event: 'purchase', math: 'sum', math_property: 'amount' },
      denominator: { kind: 'EventsNode', event: 'purchase' },
    };
    const refused = await post(`${P()}/`, {
      name: 'Sequential ratio',
      feature_flag_key: 'sequential-ratio',
      metrics: [metric],
      metrics_secondary: [ratio],
      stats_config: sequential,
    });
    expect(refused.status).toBe(400);
    expect(refused.body).toEqual({
      type: 'validation_error',
      code: 'invalid_input',
      detail: 'Sequential testing applies to mean and funnel metrics only, not to "ratio" metrics.',
      attr: 'metrics_secondary',
    });
    const exp = (
      await post(`${P()}/`, {
        name: 'Sequential',
        feature_flag_key: 'sequential-api',
        metrics: [metric],
        stats_config: { method: 'frequentist' },
      })
    ).body;
    const on = await patch(exp.id, { stats_config: sequential });
    expect(on.status).toBe(200);
    expect(on.body.stats_config.sequential).toEqual({ enabled: true });
    expect(on.body.metrics[0].fingerprint).not.toBe(exp.metrics[0].fingerprint);
    const tuned = (
      await patch(exp.id, { stats_config: { ...sequential, sequential: { enabled: true, tuning_parameter: 20000 } } })
    ).body;
    expect(tuned.metrics[0].fingerprint).not.toBe(on.body.metrics[0].fingerprint);
    // Adding a retention metric to an experiment tested sequentially is refused too.
    const retention = await patch(exp.id, {
      metrics: [
        metric,
        {
          kind: 'ExperimentMetric',
          metric_type: 'retention',
          start_event: { kind: 'EventsNode', event: 'signup' },
          completion_event: { kind: 'EventsNode', event: 'login' },
          retention_window_start: 1,
          retention_window_end: 7,
          retention_window_unit: 'day',
          start_handling: 'first_seen',
        },
      ],
    });
    expect(retention.status).toBe(400);
    expect(retention.body).toMatchObject({ attr: 'metrics', detail: expect.stringContaining('"retention"') });
    // Off again: the fingerprint of the plain frequentist analysis comes back.
    const off = (await patch(exp.id, { stats_config: { method: 'frequentist', sequential: { enabled: false } } })).body;
    expect(off.metrics[0].fingerprint).toBe(exp.metrics[0].fingerprint);
  });

  it('stores a valid correction, and the metrics’ fingerprints change with it (stale results are not reused)', async () => {
    const exp = (
      await post(`${P()}/`, {
        name: 'Corrected',
        feature_flag_key: 'corrected',
        metrics: [metric],
        stats_config: { method: 'frequentist' },
      })
    ).body;
    const holm = await patch(exp.id, { stats_config: frequentist({ method: 'holm', scope: 'metric' }) });
    expect(holm.status).toBe(200);
    expect(holm.body.stats_config.multiple_comparison_correction).toEqual({ method: 'holm', scope: 'metric' });
    expect(holm.body.metrics[0].fingerprint).not.toBe(exp.metrics[0].fingerprint);
    const bh = (await patch(exp.id, { stats_config: frequentist({ method: 'benjamini_hochberg' }) })).body;
    expect(bh.metrics[0].fingerprint).not.toBe(holm.body.metrics[0].fingerprint);
    // "none" is the same analysis as no correction at all: the fingerprint comes back.
    const none = (await patch(exp.id, { stats_config: frequentist({ method: 'none' }) })).body;
    expect(none.metrics[0].fingerprint).toBe(exp.metrics[0].fingerprint);
    // CUPED and its lookback change what is computed, so they change the fingerprint too.
    const cuped = (await patch(exp.id, { stats_config: { method: 'frequentist', cuped: { enabled: true } } })).body;
    expect(cuped.metrics[0].fingerprint).not.toBe(exp.metrics[0].fingerprint);
    const longer = (
      await patch(exp.id, { stats_config: { method: 'frequentist', cuped: { enabled: true, lookback_days: 30 } } })
    ).body;
    expect(longer.metrics[0].fingerprint).not.toBe(cuped.metrics[0].fingerprint);
  });
});

describe('actions', () => {
  it('duplicates as "(Copy)", "(Copy) 1", reusing the flag, reset to draft', async () => {
    const src = (
      await post(`${P()}/`, {
        name: 'Dup',
        feature_flag_key: 'dup',
        start_date: '2026-01-01T00:00:00Z',
        description: 'd',
      })
    ).body;
    const first = await post(`${P()}/${src.id}/duplicate/`, {});
    expect(first.status).toBe(200);
    expect(first.body).toMatchObject({
      name: 'Dup (Copy)',
      description: 'd',
      start_date: null,
      end_date: null,
      archived: false,
    });
    expect(first.body.feature_flag.id).toBe(src.feature_flag.id);
    expect((await post(`${P()}/${src.id}/duplicate/`, {})).body.name).toBe('Dup (Copy) 1');
    const custom = await post(`${P()}/${src.id}/duplicate/`, { feature_flag_key: 'dup-new' });
    expect(custom.body.feature_flag.key).toBe('dup-new');
  });

  it('creates the exposure cohort once, for launched experiments, evaluable by the persons API', async () => {
    const draft = (await post(`${P()}/`, { name: 'Expo draft', feature_flag_key: 'expo-draft' })).body;
    expect((await post(`${P()}/${draft.id}/create_exposure_cohort_for_experiment/`, {})).body.detail).toBe(
      'Experiment does not have a start date',
    );
    const exp = (await post(`${P()}/`, { name: 'Expo', feature_flag_key: 'expo', start_date: '2026-01-01T00:00:00Z' }))
      .body;
    const res = await post(`${P()}/${exp.id}/create_exposure_cohort_for_experiment/`, {});
    expect(res.status).toBe(200);
    expect(res.body.cohort).toMatchObject({
      name: 'Users exposed to experiment "Expo"',
      is_static: false,
      experiment_set: [exp.id],
    });
    expect((await get(exp.id)).body.exposure_cohort).toBe(res.body.cohort.id);
    expect((await post(`${P()}/${exp.id}/create_exposure_cohort_for_experiment/`, {})).body.detail).toBe(
      'Experiment already has an exposure cohort',
    );

    await capture(api.baseUrl, account.projectToken, [
      {
        event: '$feature_flag_called',
        distinct_id: 'exposed',
        properties: { $feature_flag: 'expo', $feature_flag_response: 'test' },
      },
      {
        event: '$feature_flag_called',
        distinct_id: 'elsewhere',
        properties: { $feature_flag: 'other-flag', $feature_flag_response: 'test' },
      },
    ]);
    const members = await call(
      api.baseUrl,
      'GET',
      `/api/projects/${account.projectId}/persons/?properties=${encodeURIComponent(JSON.stringify([{ type: 'cohort', key: 'id', value: res.body.cohort.id }]))}`,
      { key: account.apiKey },
    );
    expect(members.body.results.map((p: any) => p.distinct_ids[0])).toEqual(['exposed']);
  });

  it('requires_flag_implementation is false once events carry $feature/ properties', async () => {
    const q = (e: string) =>
      `${P()}/requires_flag_implementation/?events=${encodeURIComponent(JSON.stringify([{ id: e }]))}`;
    await capture(api.baseUrl, account.projectToken, [
      { event: 'with_flags', distinct_id: 'f', properties: { '$feature/expo': 'test' } },
      { event: 'without_flags', distinct_id: 'f' },
    ]);
    expect((await call(api.baseUrl, 'GET', q('with_flags'), { key: account.apiKey })).body).toEqual({ result: false });
    expect((await call(api.baseUrl, 'GET', q('without_flags'), { key: account.apiKey })).body).toEqual({
      result: true,
    });
    expect(
      (await call(api.baseUrl, 'GET', `${P()}/requires_flag_implementation/`, { key: account.apiKey })).body,
    ).toEqual({ result: true });
  });

  it('timeseries_results validates its parameters and reports pending before any computation', async () => {
    const draft = (await post(`${P()}/`, { name: 'TS draft', feature_flag_key: 'ts-draft' })).body;
    expect(
      (await call(api.baseUrl, 'GET', `${P()}/${draft.id}/timeseries_results/`, { key: account.apiKey })).body.detail,
    ).toBe('metric_uuid query parameter is required');
    expect(
      (await call(api.baseUrl, 'GET', `${P()}/${draft.id}/timeseries_results/?metric_uuid=m`, { key: account.apiKey }))
        .body.detail,
    ).toBe('fingerprint query parameter is required');
    expect(
      (
        await call(api.baseUrl, 'GET', `${P()}/${draft.id}/timeseries_results/?metric_uuid=m&fingerprint=f`, {
          key: account.apiKey,
        })
      ).body.detail,
    ).toBe('Experiment has not been started yet');
    const exp = (
      await post(`${P()}/`, {
        name: 'TS',
        feature_flag_key: 'ts',
        start_date: '2026-01-01T00:00:00Z',
        end_date: '2026-01-03T00:00:00Z',
      })
    ).body;
    const res = await call(api.baseUrl, 'GET', `${P()}/${exp.id}/timeseries_results/?metric_uuid=m&fingerprint=f`, {
      key: account.apiKey,
    });
    expect(res.body).toMatchObject({
      status: 'pending',
      timeseries: { '2026-01-01': null, '2026-01-02': null, '2026-01-03': null },
      errors: null,
    });
  });

  it('keeps other projects’ experiments invisible', async () => {
    const theirs = (
      await call(api.baseUrl, 'POST', `/api/projects/${other.projectId}/experiments/`, {
        key: other.apiKey,
        body: { name: 'Theirs', feature_flag_key: 'theirs' },
      })
    ).body;
    expect((await get(theirs.id)).status).toBe(404);
    expect((await patch(theirs.id, { name: 'mine now' })).status).toBe(404);
    expect((await post(`${P()}/${theirs.id}/duplicate/`, {})).status).toBe(404);
  });
});
