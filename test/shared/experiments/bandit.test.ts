// Bandits end to end: an experiment with parameters.allocation (Thompson sampling on its primary
// metric) served to the real posthog-node SDK, its worker job run over the events the SDK and the
// persons sent: the allocation moves toward the clearly better arm once there are enough exposures,
// every person keeps the variant first served (through /flags and the API's flag cache) although
// hashing on the new percentages would move many, each reallocation is in the activity log with
// its weights before and after, the results carry the bandit section, and experiments without
// allocation are left as they were.
import type { Job } from 'bullmq';
import { PostHog } from 'posthog-node';
import { describe, expect, it } from 'vitest';
import { banditReallocation } from '../../../shared/experiments/bandit-job.ts';
import { variantFor } from '../../../shared/flags/evaluate.ts';
import type { JobData } from '../../../shared/platform/jobs.ts';
import { sql } from '../../db.ts';
import { capture, type SeedEvent } from '../../fixtures.ts';
import { apiAndWorker, call, eventually } from '../../helpers.ts';

const {
  api,
  worker,
  accounts: [account],
} = await apiAndWorker({ flagCache: true });

const P = () => `/api/projects/${account.projectId}/experiments`;
const HOUR = 3600_000;
const purchaseFunnel = {
  kind: 'ExperimentMetric',
  metric_type: 'funnel',
  series: [{ kind: 'EventsNode', event: 'purchase' }],
};

const runBandit = (data: JobData['banditReallocation'], now?: Date) =>
  banditReallocation({ data } as Job<JobData['banditReallocation']>, worker.deps, now);

const sdk = (local = false) =>
  new PostHog(account.projectToken, {
    host: api.baseUrl,
    flushAt: 100,
    flushInterval: 0,
    fetchRetryCount: 0,
    ...(local ? { personalApiKey: account.apiKey } : {}),
  });

/** The variant posthog-node gets for each id (it sends the $feature_flag_called exposures). */
async function serve(client: PostHog, flagKey: string, ids: string[]): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  for (let i = 0; i < ids.length; i += 40) {
    const batch = ids.slice(i, i + 40);
    const values = await Promise.all(batch.map((id) => client.getFeatureFlag(flagKey, id)));
    for (const [j, id] of batch.entries()) out.set(id, String(values[j]));
  }
  return out;
}

/** Control persons buy 1 in 10, test persons 6 in 10 (by their order within the variant). */
async function purchases(assigned: Map<string, string>) {
  const seen = { control: 0, test: 0 } as Record<string, number>;
  const events: SeedEvent[] = [];
  for (const [id, variant] of assigned) {
    const i = seen[variant]++;
    if (variant === 'control' ? i % 10 === 0 : i % 10 < 6) events.push({ event: 'purchase', distinct_id: id });
  }
  for (let i = 0; i < events.length; i += 400)
    await capture(api.baseUrl, account.projectToken, events.slice(i, i + 400));
}

async function flagFilters(id: number) {
  return (await call(api.baseUrl, 'GET', `${P()}/${id}/`, { key: account.apiKey })).body.feature_flag.filters;
}
const weightsOf = (filters: { multivariate: { variants: { key: string; rollout_percentage: number }[] } }) =>
  Object.fromEntries(filters.multivariate.variants.map((v) => [v.key, v.rollout_percentage]));

const ids = (prefix: string, n: number) => Array.from({ length: n }, (_, i) => `${prefix}-${i}`);

describe('bandits', () => {
  it('move the allocation toward the better arm, keep persons on their first variant, log each reallocation', async () => {
    const created = await call(api.baseUrl, 'POST', `${P()}/`, {
      key: account.apiKey,
      body: {
        name: 'Bandit checkout',
        feature_flag_key: 'bandit-checkout',
        start_date: new Date(Date.now() - HOUR).toISOString(),
        metrics: [purchaseFunnel],
        // interval 24 h: the worker's own hourly schedule leaves it alone during the test.
        parameters: { allocation: { type: 'thompson_sampling', interval_hours: 24, min_exposures: 40 } },
      },
    });
    expect(created.status, created.text).toBe(201);
    const exp = created.body;
    expect(exp.parameters.allocation).toEqual({ type: 'thompson_sampling', interval_hours: 24, min_exposures: 40 });
    expect(weightsOf(exp.feature_flag.filters)).toEqual({ control: 50, test: 50 });

    // Few exposures yet: looked at, nothing moves.
    let client = sdk();
    const first = await serve(client, 'bandit-checkout', ids('early', 20));
    await client.shutdown();
    const early = await runBandit({ experimentId: exp.id, force: true });
    expect(early).toMatchObject({ looked: [exp.id], reallocated: [] });
    expect(weightsOf(await flagFilters(exp.id))).toEqual({ control: 50, test: 50 });

    // Enough exposures, test clearly better: it gets (nearly) everything above control's 5% floor.
    client = sdk();
    for (const [id, v] of await serve(client, 'bandit-checkout', ids('round1', 200))) first.set(id, v);
    await client.shutdown();
    expect(new Set(first.values())).toEqual(new Set(['control', 'test']));
    await purchases(first);
    const moved = await runBandit({ experimentId: exp.id, force: true });
    expect(moved.reallocated).toEqual([exp.id]);
    const after = weightsOf(await flagFilters(exp.id));
    expect(after.test).toBeGreaterThanOrEqual(90);
    expect(after.control).toBeGreaterThanOrEqual(5);
    expect(after.control + after.test).toBe(100);

    // The activity log: a system entry with the weights before and after.
    const log = await sql(
      api.orm,
      `select detail, is_system from activity_log where scope = 'Experiment' and item_id = ? and activity = 'bandit_reallocated'`,
      [String(exp.id)],
    );
    expect(log).toHaveLength(1);
    expect(log[0].is_system).toBe(true);
    expect(log[0].detail.changes[0]).toMatchObject({ before: { control: 50, test: 50 }, after });
    expect(log[0].detail.trigger).toMatchObject({ job: 'bandit-reallocation', metric_uuid: exp.metrics[0].uuid });
    expect(log[0].detail.trigger.probabilities.test).toBeGreaterThan(0.9);

    // New persons get the new split (once the API's flag cache has the flag's change) ...
    await eventually(async () => {
      const probe = await serve(sdk(), 'bandit-checkout', ids(`probe-${Date.now()}`, 40));
      return [...probe.values()].filter((v) => v === 'test').length >= 30 || null;
    }, 30_000);
    client = sdk(true); // local evaluation: the sticky flag is left to the server
    const second = await serve(client, 'bandit-checkout', ids('round2', 200));
    expect([...second.values()].filter((v) => v === 'test').length).toBeGreaterThanOrEqual(160);
    // ... and everyone keeps the variant first served, though hashing on the new split moves many.
    const again = await serve(client, 'bandit-checkout', [...first.keys()]);
    await client.shutdown();
    expect([...again]).toEqual([...first]);
    const variants = (await flagFilters(exp.id)).multivariate.variants;
    const rehashed = [...first].filter(([id, v]) => variantFor('bandit-checkout', id, variants) !== v);
    expect(rehashed.length).toBeGreaterThan(20);
    const http = await fetch(`${api.baseUrl}/flags/?v=2`, {
      method: 'POST',
      body: JSON.stringify({ token: account.projectToken, distinct_id: rehashed[0][0] }),
    });
    expect((await http.json()).flags['bandit-checkout'].variant).toBe(rehashed[0][1]);

    // A person's deletion forgets the variants their distinct ids were served.
    const [gone] = [...first.keys()];
    const stickyOf = (id: string) =>
      sql(api.orm, `select variant from feature_flag_sticky_variant where project_id = ? and bucketing_value = ?`, [
        account.projectId,
        id,
      ]);
    expect(await stickyOf(gone)).toEqual([{ variant: first.get(gone) }]);
    await sql(
      api.orm,
      `delete from person where id = (select person_id from person_distinct_id where project_id = ? and distinct_id = ?)`,
      [account.projectId, gone],
    );
    expect(await stickyOf(gone)).toEqual([]);
    first.delete(gone);

    // The next look, a day later: a new period; not due again right after.
    await purchases(second);
    const later = new Date(Date.now() + 25 * HOUR);
    expect((await runBandit({}, later)).looked).toContain(exp.id);
    expect((await runBandit({ experimentId: exp.id }, later)).looked).toEqual([]);

    // The results' bandit section: weights, history, the period-weighted estimate and its interval.
    const metric = exp.metrics[0];
    const results = await call(
      api.baseUrl,
      'GET',
      `${P()}/${exp.id}/timeseries_results/?metric_uuid=${metric.uuid}&fingerprint=${metric.fingerprint}`,
      { key: account.apiKey },
    );
    expect(results.status, results.text).toBe(200);
    const bandit = results.body.bandit;
    expect(bandit).toMatchObject({
      allocation: { type: 'thompson_sampling', interval_hours: 24, floor: 0.05, min_exposures: 40 },
      metric_uuid: metric.uuid,
      estimate_method: 'batched_ols',
      weights: weightsOf(await flagFilters(exp.id)),
    });
    expect(bandit.history.length).toBeGreaterThanOrEqual(1);
    expect(bandit.history[0]).toMatchObject({ before: { control: 50, test: 50 }, after });
    expect(bandit.periods.length).toBe(bandit.history.length + 1);
    expect(bandit.exposures.control + bandit.exposures.test).toBe(419); // (one person deleted)
    const [estimate] = bandit.estimates;
    expect(estimate.variant).toBe('test');
    expect(estimate.interval[0]).toBeGreaterThan(0.3);
    expect(estimate.interval[0]).toBeLessThan(estimate.estimate);
    expect(estimate.interval[1]).toBeGreaterThan(estimate.estimate);
    expect(estimate.interval[1]).toBeLessThan(0.7);
  }, 240_000);

  it('leave experiments without allocation alone: no reallocation, no sticky assignment, no bandit section', async () => {
    const created = await call(api.baseUrl, 'POST', `${P()}/`, {
      key: account.apiKey,
      body: {
        name: 'Plain checkout',
        feature_flag_key: 'plain-checkout',
        start_date: new Date(Date.now() - HOUR).toISOString(),
        metrics: [purchaseFunnel],
      },
    });
    expect(created.status, created.text).toBe(201);
    const exp = created.body;
    const client = sdk();
    const served = await serve(client, 'plain-checkout', ids('plain', 120));
    await client.shutdown();
    await purchases(served);
    const run = await runBandit({ force: true });
    expect(run.looked).not.toContain(exp.id);
    expect(await flagFilters(exp.id)).toEqual(exp.feature_flag.filters);
    const sticky = await sql(
      api.orm,
      `select count(*)::int as n from feature_flag_sticky_variant where feature_flag_id = ?`,
      [exp.feature_flag.id],
    );
    expect(sticky[0].n).toBe(0);
    const bandits = await sql(api.orm, `select count(*)::int as n from experiment_bandit where experiment_id = ?`, [
      exp.id,
    ]);
    expect(bandits[0].n).toBe(0);
    const metric = exp.metrics[0];
    const results = await call(
      api.baseUrl,
      'GET',
      `${P()}/${exp.id}/timeseries_results/?metric_uuid=${metric.uuid}&fingerprint=${metric.fingerprint}`,
      { key: account.apiKey },
    );
    expect(results.status, results.text).toBe(200);
    expect(results.body.bandit).toBeNull();
    // Local evaluation definitions: only the bandit's flag is left to the server.
    const definitions = await call(api.baseUrl, 'GET', `/flags/definitions?token=${account.projectToken}`, {
      key: account.apiKey,
    });
    const continuity = Object.fromEntries(
      definitions.body.flags.map((f: { key: string; ensure_experience_continuity: boolean }) => [
        f.key,
        f.ensure_experience_continuity,
      ]),
    );
    expect(continuity['plain-checkout']).toBe(false);
    expect(continuity['bandit-checkout']).toBe(true);
  }, 120_000);

  it('keep persons on their variants of several bandit flags at once (one read for all of them)', async () => {
    const keys = ['bandit-two-a', 'bandit-two-b'];
    const flagIds: number[] = [];
    for (const key of keys) {
      const res = await call(api.baseUrl, 'POST', `${P()}/`, {
        key: account.apiKey,
        body: {
          name: key,
          feature_flag_key: key,
          start_date: new Date(Date.now() - HOUR).toISOString(),
          metrics: [purchaseFunnel],
          parameters: { allocation: { type: 'thompson_sampling', interval_hours: 24 } },
        },
      });
      expect(res.status, res.text).toBe(201);
      flagIds.push(res.body.feature_flag.id);
    }
    const people = ids('two', 30);
    const ask = async () => {
      const out: string[] = [];
      for (const id of people) {
        const res = await fetch(`${api.baseUrl}/flags/?v=2`, {
          method: 'POST',
          body: JSON.stringify({ token: account.projectToken, distinct_id: id }),
        });
        const flags = (await res.json()).flags;
        out.push(keys.map((k) => flags[k].variant).join('/'));
      }
      return out;
    };
    const before = await ask();
    expect(new Set(before).size).toBeGreaterThan(1);
    // Every new person to test on both flags (as a reallocation to the extreme would): the others stay.
    for (const id of flagIds)
      await sql(
        api.orm,
        `update feature_flag set filters = jsonb_set(filters, '{multivariate,variants}',
           '[{"key": "control", "rollout_percentage": 0}, {"key": "test", "rollout_percentage": 100}]') where id = ?`,
        [id],
      );
    await eventually(async () => {
      const res = await fetch(`${api.baseUrl}/flags/?v=2`, {
        method: 'POST',
        body: JSON.stringify({ token: account.projectToken, distinct_id: `two-new-${Date.now()}` }),
      });
      const flags = (await res.json()).flags;
      return keys.every((k) => flags[k].variant === 'test') || null;
    }, 30_000);
    expect(await ask()).toEqual(before);
  });

  it('refuse a malformed allocation with a 400 on parameters', async () => {
    for (const allocation of [
      { type: 'epsilon_greedy' },
      { type: 'thompson_sampling', interval_hours: 0 },
      { type: 'thompson_sampling', floor: 0.6 },
      'on',
    ]) {
      const res = await call(api.baseUrl, 'POST', `${P()}/`, {
        key: account.apiKey,
        body: { name: 'Bad bandit', feature_flag_key: 'bad-bandit', parameters: { allocation } },
      });
      expect(res.status, res.text).toBe(400);
      expect(res.body).toMatchObject({ type: 'validation_error', attr: 'parameters' });
    }
  });
});
