import { describe, expect, it } from 'vitest';
import { apiWithAccount, call } from '../../helpers.ts';

const { api, account } = await apiWithAccount();
const base = () => `/api/projects/${account.projectId}`;
const req = (method: string, path: string, body?: unknown) =>
  call(api.baseUrl, method, `${base()}${path}`, { key: account.apiKey, body });

describe('holdouts', () => {
  it('validates filters, tags them with holdout-<id>, and drives the flag of its experiments', async () => {
    expect((await req('POST', '/experiment_holdouts/', { name: 'h', filters: [] })).body.detail).toBe(
      'Filters are required to create an holdout group',
    );
    expect((await req('POST', '/experiment_holdouts/', { name: 'h', filters: [{}] })).body.detail).toBe(
      'Rollout percentage must be present.',
    );
    expect(
      (await req('POST', '/experiment_holdouts/', { name: 'h', filters: [{ rollout_percentage: 120 }] })).body.detail,
    ).toBe('Rollout percentage must be between 0 and 100.');
    const holdout = await req('POST', '/experiment_holdouts/', {
      name: 'Ten percent',
      filters: [{ properties: [], rollout_percentage: 10 }],
    });
    expect(holdout.status).toBe(201);
    expect(holdout.body.filters).toEqual([
      { properties: [], rollout_percentage: 10, variant: `holdout-${holdout.body.id}` },
    ]);

    const exp = (
      await req('POST', '/experiments/', {
        name: 'With holdout',
        feature_flag_key: 'with-holdout',
        holdout_id: holdout.body.id,
      })
    ).body;
    expect(exp.holdout).toMatchObject({ id: holdout.body.id, name: 'Ten percent' });
    expect(exp.feature_flag.filters.holdout).toEqual({ id: holdout.body.id, exclusion_percentage: 10 });

    const cleared = await req('PATCH', `/experiments/${exp.id}/`, { holdout_id: null });
    expect(cleared.body.feature_flag.filters.holdout_groups).toBeNull();
    await req('PATCH', `/experiments/${exp.id}/`, { holdout_id: holdout.body.id });
    await req('PATCH', `/experiment_holdouts/${holdout.body.id}/`, {
      filters: [{ properties: [], rollout_percentage: 20 }],
    });
    expect((await req('GET', `/experiments/${exp.id}/`)).body.feature_flag.filters.holdout).toEqual({
      id: holdout.body.id,
      exclusion_percentage: 20,
    });

    await req('PATCH', `/experiments/${exp.id}/`, { start_date: '2026-01-01T00:00:00Z' });
    const other = (await req('POST', '/experiment_holdouts/', { name: 'Other', filters: [{ rollout_percentage: 5 }] }))
      .body;
    expect((await req('PATCH', `/experiments/${exp.id}/`, { holdout_id: other.id })).body.detail).toBe(
      "Can't update holdout on running Experiment",
    );

    expect((await req('DELETE', `/experiment_holdouts/${holdout.body.id}/`)).status).toBe(204);
    const after = (await req('GET', `/experiments/${exp.id}/`)).body;
    expect(after.holdout_id).toBeNull();
    expect(after.feature_flag.filters.holdout).toBeNull();
  });
});

describe('saved metrics', () => {
  it('validates queries, links to experiments with replace semantics, and deleting one removes its links', async () => {
    const bad: [unknown, string][] = [
      [{ name: 'm', query: {} }, 'Query is required to create a saved metric'],
      [
        { name: 'm', query: { kind: 'Nope' } },
        "Metric query kind must be 'ExperimentMetric', 'ExperimentTrendsQuery' or 'ExperimentFunnelsQuery'",
      ],
      [{ name: 'm', query: { kind: 'ExperimentMetric' } }, 'ExperimentMetric requires a metric_type'],
      [
        { name: 'm', query: { kind: 'ExperimentMetric', metric_type: 'median' } },
        "ExperimentMetric metric_type must be 'mean', 'funnel', 'ratio', 'retention', or 'percentile'",
      ],
    ];
    for (const [body, detail] of bad)
      expect((await req('POST', '/experiment_saved_metrics/', body)).body.detail).toBe(detail);
    const m1 = (
      await req('POST', '/experiment_saved_metrics/', {
        name: 'Revenue',
        query: { kind: 'ExperimentMetric', metric_type: 'mean' },
        tags: ['a', 'a'],
      })
    ).body;
    expect(m1.tags).toEqual(['a']);
    const m2 = (
      await req('POST', '/experiment_saved_metrics/', {
        name: 'Conversion',
        query: { kind: 'ExperimentMetric', metric_type: 'funnel' },
      })
    ).body;

    const exp = (
      await req('POST', '/experiments/', {
        name: 'Linked',
        feature_flag_key: 'linked',
        saved_metrics_ids: [{ id: m1.id, metadata: { type: 'primary' } }],
      })
    ).body;
    expect(exp.saved_metrics).toMatchObject([
      { saved_metric: m1.id, name: 'Revenue', metadata: { type: 'primary' }, experiment: exp.id },
    ]);
    for (const [ids, detail] of [
      [{ id: m1.id }, 'Expected a list of items but got type "dict".'],
      [['x'], 'Saved metric must be an object'],
      [[{}], 'Saved metric must have an id'],
      [[{ id: m1.id, metadata: 'x' }], 'Metadata must be an object'],
      [[{ id: m1.id, metadata: {} }], 'Metadata must have a type key'],
    ] as const) {
      expect((await req('PATCH', `/experiments/${exp.id}/`, { saved_metrics_ids: ids })).body.detail).toBe(detail);
    }
    const replaced = (
      await req('PATCH', `/experiments/${exp.id}/`, {
        saved_metrics_ids: [{ id: m2.id, metadata: { type: 'secondary' } }],
      })
    ).body;
    expect(replaced.saved_metrics.map((l: any) => l.saved_metric)).toEqual([m2.id]);
    expect(
      (await req('PATCH', `/experiments/${exp.id}/`, { description: 'links untouched' })).body.saved_metrics,
    ).toHaveLength(1);
    expect((await req('DELETE', `/experiment_saved_metrics/${m2.id}/`)).status).toBe(204);
    expect((await req('GET', `/experiments/${exp.id}/`)).body.saved_metrics).toEqual([]);
    expect((await req('GET', '/experiment_saved_metrics/')).body.results.map((m: any) => m.name)).toEqual(['Revenue']);
  });
});
