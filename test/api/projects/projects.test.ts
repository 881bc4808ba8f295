import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createProject } from '../../../shared/accounts/service.ts';
import { call, createAccount, startApi, type TestAccount, type TestApi } from '../../helpers.ts';

let api: TestApi;
let account: TestAccount;

beforeAll(async () => {
  api = await startApi();
  account = await createAccount(api.orm);
  await createAccount(api.orm); // another organization, never listed
  for (let i = 0; i < 4; i++) await createProject(api.orm.em.fork(), account.organizationId, `Extra ${i}`);
});
afterAll(() => api.close());

describe('GET /api/projects/', () => {
  it('lists only the projects of the user’s organizations with PostHog’s basic fields', async () => {
    const res = await call(api.baseUrl, 'GET', '/api/projects/', { key: account.apiKey });
    expect(res.status).toBe(200);
    expect(res.body.count).toBe(5);
    expect(res.body.next).toBeNull();
    expect(res.body.previous).toBeNull();
    expect(Object.keys(res.body.results[0]).sort()).toEqual(
      [
        'access_control',
        'api_token',
        'completed_snippet_onboarding',
        'has_completed_onboarding_for',
        'id',
        'ingested_event',
        'is_demo',
        'name',
        'organization',
        'timezone',
        'uuid',
      ].sort(),
    );
    expect(res.body.results.every((p: any) => p.organization === account.organizationId)).toBe(true);
    expect(res.body.results[0].api_token).toMatch(/^phc_/);
  });

  it('paginates with absolute next/previous links that keep other parameters', async () => {
    const first = await call(api.baseUrl, 'GET', '/api/projects/?limit=2&zeta=1', { key: account.apiKey });
    expect(first.body.results).toHaveLength(2);
    expect(first.body.next).toBe(`${api.baseUrl}/api/projects/?limit=2&offset=2&zeta=1`);
    expect(first.body.previous).toBeNull();

    const second = await call(api.baseUrl, 'GET', first.body.next.slice(api.baseUrl.length), { key: account.apiKey });
    expect(second.body.previous).toBe(`${api.baseUrl}/api/projects/?limit=2&zeta=1`);
    expect(second.body.next).toBe(`${api.baseUrl}/api/projects/?limit=2&offset=4&zeta=1`);

    const last = await call(api.baseUrl, 'GET', second.body.next.slice(api.baseUrl.length), { key: account.apiKey });
    expect(last.body.results).toHaveLength(1);
    expect(last.body.next).toBeNull();
    expect(last.body.previous).toBe(`${api.baseUrl}/api/projects/?limit=2&offset=2&zeta=1`);

    const ids = [...first.body.results, ...second.body.results, ...last.body.results].map((p: any) => p.id);
    expect(new Set(ids).size).toBe(5);
  });

  it('answers absurdly large limits and offsets without a database error', async () => {
    const res = await call(
      api.baseUrl,
      'GET',
      '/api/projects/?limit=99999999999999999999999&offset=99999999999999999999999',
      { key: account.apiKey },
    );
    expect(res.status).toBe(200);
    expect(res.body.results).toEqual([]);
  });

  it('falls back to the default page size for bad limits and to 0 for bad offsets', async () => {
    const res = await call(api.baseUrl, 'GET', '/api/projects/?limit=abc&offset=-3', { key: account.apiKey });
    expect(res.status).toBe(200);
    expect(res.body.results).toHaveLength(5);
  });
});

describe('organization-scoped keys', () => {
  it('list only the projects of their organizations', async () => {
    const { createKey } = await import('../../helpers.ts');
    const scoped = await createKey(api.orm, account.userId, { scopedOrganizations: [account.organizationId] });
    const res = await call(api.baseUrl, 'GET', '/api/projects/', { key: scoped });
    expect(res.status).toBe(200);
    expect(res.body.count).toBe(5);
    const elsewhere = await createKey(api.orm, account.userId, {
      scopedOrganizations: ['00000000-0000-0000-0000-000000000000'],
    });
    const none = await call(api.baseUrl, 'GET', '/api/projects/', { key: elsewhere });
    expect(none.body.count).toBe(0);
  });
});

describe('GET /api/projects/:id/', () => {
  it('returns the detail fields with Z timestamps', async () => {
    const res = await call(api.baseUrl, 'GET', `/api/projects/${account.projectId}`, { key: account.apiKey });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      id: account.projectId,
      project_id: account.projectId,
      timezone: 'UTC',
      organization: account.organizationId,
    });
    expect(res.body.created_at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?Z$/);
  });
});
