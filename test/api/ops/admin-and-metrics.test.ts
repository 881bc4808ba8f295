import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, createAccount, startApi, uniqueRedisPrefix, type TestApi } from '../../helpers.ts';

let api: TestApi;
let noDashboard: TestApi;

beforeAll(async () => {
  const prefix = uniqueRedisPrefix();
  api = await startApi((config) => {
    config.adminPassword = 's3cret';
    config.redisPrefix = prefix;
  });
  noDashboard = await startApi();
});
afterAll(async () => {
  await api.close();
  await noDashboard.close();
});

describe('queue dashboard', () => {
  it('requires the admin credential', async () => {
    const anonymous = await fetch(`${api.baseUrl}/admin/queues`);
    expect(anonymous.status).toBe(401);
    expect(anonymous.headers.get('www-authenticate')).toContain('Basic');
    const wrong = await fetch(`${api.baseUrl}/admin/queues`, { headers: { authorization: `Basic ${Buffer.from('admin:nope').toString('base64')}` } });
    expect(wrong.status).toBe(401);
    const ok = await fetch(`${api.baseUrl}/admin/queues`, { headers: { authorization: `Basic ${Buffer.from('admin:s3cret').toString('base64')}` } });
    expect(ok.status).toBe(200);
    expect(await ok.text()).toContain('<html');
    const queues = await fetch(`${api.baseUrl}/admin/queues/api/queues`, { headers: { authorization: `Basic ${Buffer.from('admin:s3cret').toString('base64')}` } });
    expect((await queues.json()).queues.map((q: any) => q.name).sort()).toEqual(['deletions', 'experiment-results', 'maintenance']);
  });

  it('is not mounted without ADMIN_PASSWORD', async () => {
    expect((await fetch(`${noDashboard.baseUrl}/admin/queues`)).status).toBe(404);
  });
});

describe('GET /metrics', () => {
  it('exposes request durations by route, queue job counts per state and deletion requests by status', async () => {
    const account = await createAccount(api.orm);
    await call(api.baseUrl, 'GET', `/api/projects/${account.projectId}/persons/`, { key: account.apiKey });
    await api.deps.queues.deletions.add('reconcile', {}, { delay: 60_000 });
    const res = await fetch(`${api.baseUrl}/metrics`);
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text).toMatch(/http_request_duration_seconds_count\{method="GET",route="\/api\/projects\/:project_id\/persons",status="200"\} \d+/);
    expect(text).toMatch(/bullmq_job_count\{queue="deletions", ?state="delayed"\} 1/);
    expect(text).toMatch(/bullmq_job_count\{queue="experiment-results", ?state="waiting"\} 0/);
    expect(text.match(/^# TYPE bullmq_job_count gauge$/gm)).toHaveLength(1);
    expect(text).toMatch(/deletion_requests\{status="pending"\} \d+/);
  });
});
