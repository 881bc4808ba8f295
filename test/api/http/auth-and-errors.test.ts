import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, createAccount, createKey, startApi, type TestAccount, type TestApi } from '../../helpers.ts';

let api: TestApi;
let account: TestAccount;
let other: TestAccount;

beforeAll(async () => {
  api = await startApi();
  account = await createAccount(api.orm);
  other = await createAccount(api.orm);
});
afterAll(() => api.close());

describe('authentication', () => {
  it('answers 401 not_authenticated without a key', async () => {
    const res = await call(api.baseUrl, 'GET', `/api/projects/${account.projectId}/`);
    expect(res.status).toBe(401);
    expect(res.body).toEqual({
      type: 'authentication_error',
      code: 'not_authenticated',
      detail: 'Authentication credentials were not provided.',
      attr: null,
    });
  });

  it('answers 401 authentication_failed for an unknown key, naming where it was found', async () => {
    const res = await call(api.baseUrl, 'GET', `/api/projects/${account.projectId}/`, {
      key: 'phx_not_a_real_key_at_all',
    });
    expect(res.status).toBe(401);
    expect(res.body).toEqual({
      type: 'authentication_error',
      code: 'authentication_failed',
      detail: 'Personal API key found in request Authorization header is invalid.',
      attr: null,
    });
    const fromQuery = await call(api.baseUrl, 'GET', `/api/projects/${account.projectId}/?personal_api_key=phx_nope`);
    expect(fromQuery.body.detail).toBe('Personal API key found in request query string is invalid.');
  });

  it('accepts the key from the query string and tolerates extra whitespace in the header', async () => {
    const viaQuery = await call(
      api.baseUrl,
      'GET',
      `/api/projects/${account.projectId}/?personal_api_key=${account.apiKey}`,
    );
    expect(viaQuery.status).toBe(200);
    const spaced = await call(api.baseUrl, 'GET', `/api/projects/${account.projectId}/`, {
      headers: { authorization: `Bearer   ${account.apiKey}  ` },
    });
    expect(spaced.status).toBe(200);
  });

  it('refuses a key of a deactivated user with 401', async () => {
    const victim = await createAccount(api.orm);
    await api.orm.em
      .fork()
      .getConnection()
      .execute('update app_user set is_active = false where id = ?', [victim.userId]);
    const res = await call(api.baseUrl, 'GET', `/api/projects/${victim.projectId}/`, { key: victim.apiKey });
    expect(res.status).toBe(401);
    expect(res.body.code).toBe('authentication_failed');
  });
});

describe('scopes', () => {
  it('names the missing scope in a 403', async () => {
    const key = await createKey(api.orm, account.userId, { scopes: ['person:read'] });
    const res = await call(api.baseUrl, 'GET', `/api/projects/${account.projectId}/`, { key });
    expect(res.status).toBe(403);
    expect(res.body).toEqual({
      type: 'authentication_error',
      code: 'permission_denied',
      detail: "API key missing required scope 'project:read'",
      attr: null,
    });
  });

  it('lets a write scope stand for read, and legacy keys without scopes do everything', async () => {
    const writeKey = await createKey(api.orm, account.userId, { scopes: ['project:write'] });
    expect((await call(api.baseUrl, 'GET', `/api/projects/${account.projectId}/`, { key: writeKey })).status).toBe(200);
    const legacy = await createKey(api.orm, account.userId, { scopes: null });
    expect((await call(api.baseUrl, 'GET', `/api/projects/${account.projectId}/`, { key: legacy })).status).toBe(200);
    const empty = await createKey(api.orm, account.userId, { scopes: [] });
    expect((await call(api.baseUrl, 'GET', `/api/projects/${account.projectId}/`, { key: empty })).status).toBe(200);
  });

  it('enforces scoped_teams on project routes and lists only the scoped projects', async () => {
    const em = api.orm.em.fork();
    const { createProject } = await import('../../../shared/accounts/service.ts');
    const second = await createProject(em, account.organizationId, 'Second');
    const scoped = await createKey(api.orm, account.userId, { scopedTeams: [account.projectId] });
    expect((await call(api.baseUrl, 'GET', `/api/projects/${account.projectId}/`, { key: scoped })).status).toBe(200);
    const denied = await call(api.baseUrl, 'GET', `/api/projects/${second.id}/`, { key: scoped });
    expect(denied.status).toBe(403);
    expect(denied.body.detail).toBe(`API key does not have access to the requested project: ID ${second.id}.`);
    // PostHog answers 403 here, which broke clients that discover projects (Zapier, #20531).
    const list = await call(api.baseUrl, 'GET', `/api/projects/`, { key: scoped });
    expect(list.status).toBe(200);
    expect(list.body.results.map((p: any) => p.id)).toEqual([account.projectId]);
  });

  it('enforces scoped_organizations', async () => {
    const scoped = await createKey(api.orm, account.userId, { scopedOrganizations: [other.organizationId] });
    const res = await call(api.baseUrl, 'GET', `/api/projects/${account.projectId}/`, { key: scoped });
    expect(res.status).toBe(403);
    expect(res.body.detail).toBe(
      `API key does not have access to the requested organization: ID ${account.organizationId}.`,
    );
  });
});

describe('project access', () => {
  it("answers 403 for another organization's project and 404 for an unknown one", async () => {
    const res = await call(api.baseUrl, 'GET', `/api/projects/${other.projectId}/`, { key: account.apiKey });
    expect(res.status).toBe(403);
    expect(res.body).toEqual({
      type: 'authentication_error',
      code: 'permission_denied',
      detail: "You don't have access to the project.",
      attr: null,
    });
    for (const id of ['999999999', 'abc', '-1', "1'--"]) {
      const missing = await call(api.baseUrl, 'GET', `/api/projects/${encodeURIComponent(id)}/`, {
        key: account.apiKey,
      });
      expect(missing.status, id).toBe(404);
      expect(missing.body).toEqual({
        type: 'invalid_request',
        code: 'not_found',
        detail: 'Project not found.',
        attr: null,
      });
    }
  });

  it('resolves @current to the user’s current project, with or without trailing slash', async () => {
    for (const path of [
      '/api/projects/@current',
      '/api/projects/@current/',
      `/api/environments/${account.projectId}`,
    ]) {
      const res = await call(api.baseUrl, 'GET', path, { key: account.apiKey });
      expect(res.status, path).toBe(200);
      expect(res.body.id).toBe(account.projectId);
      expect(res.body.api_token).toBe(account.projectToken);
    }
  });
});

describe('error bodies', () => {
  it('answers an oversized URL with 431 in the error shape (found by the robustness suite)', async () => {
    const res = await call(api.baseUrl, 'GET', `/api/projects/?search=${'x'.repeat(40_000)}`, { key: account.apiKey });
    expect(res.status).toBe(431);
    expect(res.body).toEqual({
      type: 'invalid_request',
      code: 'request_header_fields_too_large',
      detail: 'Request URL or headers are too large.',
      attr: null,
    });
  });

  it('answers unknown routes with 404 and unrouted methods with 405', async () => {
    const missing = await call(api.baseUrl, 'GET', '/api/no-such-thing/', { key: account.apiKey });
    expect(missing.status).toBe(404);
    expect(missing.body).toEqual({ type: 'invalid_request', code: 'not_found', detail: 'Not found.', attr: null });
    const wrongMethod = await call(api.baseUrl, 'PUT', `/api/projects/${account.projectId}/`, { key: account.apiKey });
    expect(wrongMethod.status).toBe(405);
    expect(wrongMethod.body).toEqual({
      type: 'invalid_request',
      code: 'method_not_allowed',
      detail: 'Method "PUT" not allowed.',
      attr: null,
    });
  });
});
