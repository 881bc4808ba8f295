// An experiment end to end with the real posthog-node SDK: launch it, ask for the flag for many
// distinct ids (which also sends $feature_flag_called), then check stability, the split, the stored
// exposures, the exposure cohort and the results job.
import { PostHog } from 'posthog-node';
import { gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { computeExperimentResults } from '../../../shared/experiments/results-job.ts';
import { sql } from '../../db.ts';
import {
  call,
  createAccount,
  startApi,
  startTestWorker,
  uniqueRedisPrefix,
  type TestAccount,
  type TestApi,
} from '../../helpers.ts';

const prefix = uniqueRedisPrefix();
let api: TestApi;
let account: TestAccount;
const N = 2000;

beforeAll(async () => {
  api = await startApi((config) => {
    config.redisPrefix = prefix;
  });
  account = await createAccount(api.orm);
});
afterAll(() => api.close());

describe('flags for SDKs', () => {
  it('serves a launched experiment’s variants to posthog-node: stable, split by rollout, exposures stored and counted', async () => {
    const P = `/api/projects/${account.projectId}/experiments`;
    const exp = (
      await call(api.baseUrl, 'POST', `${P}/`, {
        key: account.apiKey,
        body: {
          name: 'SDK',
          feature_flag_key: 'sdk-exp',
          metrics: [{ kind: 'ExperimentMetric', metric_type: 'mean', source: { kind: 'EventsNode', event: 'never' } }],
        },
      })
    ).body;
    const client = new PostHog(account.projectToken, {
      host: api.baseUrl,
      flushAt: 100,
      flushInterval: 0,
      fetchRetryCount: 0,
    });
    expect(await client.getFeatureFlag('sdk-exp', 'before-launch')).toBeUndefined(); // draft: flag inactive
    await call(api.baseUrl, 'PATCH', `${P}/${exp.id}/`, {
      key: account.apiKey,
      body: { start_date: new Date(Date.now() - 60_000).toISOString() },
    });

    const assigned = new Map<string, string>();
    const ids = Array.from({ length: N }, (_, i) => `sdk-user-${i}`);
    for (let i = 0; i < ids.length; i += 50) {
      const batch = ids.slice(i, i + 50);
      const values = await Promise.all(batch.map((id) => client.getFeatureFlag('sdk-exp', id)));
      for (const [j, id] of batch.entries()) assigned.set(id, values[j] as string);
    }
    await client.shutdown();
    const control = [...assigned.values()].filter((v) => v === 'control').length;
    const test = [...assigned.values()].filter((v) => v === 'test').length;
    expect(control + test).toBe(N);
    expect(Math.abs(control / N - 0.5)).toBeLessThan(0.045); // > 4 standard deviations
    // Stable: asking again gives the same variant.
    const again = new PostHog(account.projectToken, {
      host: api.baseUrl,
      flushAt: 100,
      flushInterval: 0,
      sendFeatureFlagEvent: false,
    });
    for (const id of ids.slice(0, 50)) expect(await again.getFeatureFlag('sdk-exp', id)).toBe(assigned.get(id));
    await again.shutdown();

    const [exposures] = await sql(
      api.orm,
      `select count(distinct distinct_id)::int as n from event where project_id = ? and event = '$feature_flag_called' and properties->>'$feature_flag' = 'sdk-exp' and properties->>'$feature_flag_response' in ('control', 'test')`,
      [account.projectId],
    );
    expect(exposures.n).toBe(N);

    const cohort = (
      await call(api.baseUrl, 'POST', `${P}/${exp.id}/create_exposure_cohort_for_experiment/`, { key: account.apiKey })
    ).body.cohort;
    const members = await call(
      api.baseUrl,
      'GET',
      `/api/projects/${account.projectId}/persons/?limit=1&include_total=true&properties=${encodeURIComponent(JSON.stringify([{ type: 'cohort', key: 'id', value: cohort.id }]))}`,
      { key: account.apiKey },
    );
    expect(members.body.count).toBe(N);

    const worker = await startTestWorker(prefix);
    try {
      await computeExperimentResults({ data: { experimentId: exp.id } } as any, worker.deps);
    } finally {
      await worker.close();
    }
    const metric = (await call(api.baseUrl, 'GET', `${P}/${exp.id}/`, { key: account.apiKey })).body.metrics[0];
    const series = (
      await call(
        api.baseUrl,
        'GET',
        `${P}/${exp.id}/timeseries_results/?metric_uuid=${metric.uuid}&fingerprint=${metric.fingerprint}`,
        { key: account.apiKey },
      )
    ).body;
    const latest: any = Object.values(series.timeseries).filter(Boolean).at(-1);
    expect(latest.baseline.number_of_samples).toBe(control);
    expect(latest.variant_results[0].number_of_samples).toBe(test);
  }, 120_000);

  it('answers /flags v1 and v2, /decide, gzip bodies, and refuses bad tokens', async () => {
    const flag = (
      await call(api.baseUrl, 'POST', `/api/projects/${account.projectId}/experiments/`, {
        key: account.apiKey,
        body: { name: 'Shapes', feature_flag_key: 'shapes', start_date: new Date().toISOString() },
      })
    ).body.feature_flag;
    const ask = (path: string, body: unknown, headers: Record<string, string> = {}) =>
      fetch(`${api.baseUrl}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers },
        body: typeof body === 'string' || Buffer.isBuffer(body) ? (body as BodyInit) : JSON.stringify(body),
      });
    const v2 = await (await ask('/flags/?v=2', { token: account.projectToken, distinct_id: 'shape-user' })).json();
    expect(v2.flags.shapes).toMatchObject({
      key: 'shapes',
      enabled: true,
      reason: { code: 'condition_match' },
      metadata: { id: flag.id },
    });
    expect(['control', 'test']).toContain(v2.flags.shapes.variant);
    const v1 = await (await ask('/flags/', { token: account.projectToken, distinct_id: 'shape-user' })).json();
    expect(v1.featureFlags.shapes).toBe(v2.flags.shapes.variant);
    const decide = await (
      await ask('/decide/?v=3', gzipSync(JSON.stringify({ api_key: account.projectToken, distinct_id: 'shape-user' })))
    ).json();
    expect(decide.featureFlags.shapes).toBe(v2.flags.shapes.variant);
    expect(decide.supportedCompression).toContain('gzip');
    const bad = await ask('/flags/?v=2', { token: 'phc_nope', distinct_id: 'x' });
    expect(bad.status).toBe(401);
    expect((await bad.json()).code).toBe('invalid_api_key');
    expect((await ask('/flags/?v=2', { token: account.projectToken })).status).toBe(400);
  });

  it('serves flag definitions for local evaluation to a personal key with feature_flag:read, with ETags', async () => {
    const res = await call(api.baseUrl, 'GET', `/flags/definitions?token=${account.projectToken}&send_cohorts`, {
      key: account.apiKey,
    });
    expect(res.status).toBe(200);
    expect(res.body.flags.map((f: any) => f.key)).toContain('shapes');
    const etag = res.headers.get('etag')!;
    const cached = await fetch(`${api.baseUrl}/flags/definitions?token=${account.projectToken}`, {
      headers: { authorization: `Bearer ${account.apiKey}`, 'if-none-match': etag },
    });
    expect(cached.status).toBe(304);
    const other = await createAccount(api.orm);
    const foreign = await call(api.baseUrl, 'GET', `/flags/definitions?token=${account.projectToken}`, {
      key: other.apiKey,
    });
    expect(foreign.status).toBe(403);
    // posthog-node evaluating locally agrees with the server.
    const local = new PostHog(account.projectToken, {
      host: api.baseUrl,
      personalApiKey: account.apiKey,
      flushAt: 100,
      flushInterval: 0,
      sendFeatureFlagEvent: false,
    });
    await local.reloadFeatureFlags();
    for (const id of ['a', 'b', 'c', 'd', 'e']) {
      const server = await (
        await fetch(`${api.baseUrl}/flags/?v=2`, {
          method: 'POST',
          body: JSON.stringify({ token: account.projectToken, distinct_id: id }),
        })
      ).json();
      expect(await local.getFeatureFlag('shapes', id, { onlyEvaluateLocally: true })).toBe(server.flags.shapes.variant);
    }
    await local.shutdown();
  });
});
