// /api/organizations/…, /api/projects/ and /api/users/@me agree on what a key can reach:
// memberships narrowed by the key's organization and project scoping.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createOrganization, createProject, setMembership } from '../../../shared/accounts/service.ts';
import { call, createAccount, createKey, startApi, type TestAccount, type TestApi } from '../../helpers.ts';

let api: TestApi;
let account: TestAccount;
let other: TestAccount;
let secondOrgId: string;
let secondOrgProject: number;
let extraProject: number;

beforeAll(async () => {
  api = await startApi();
  account = await createAccount(api.orm);
  other = await createAccount(api.orm);
  const em = api.orm.em.fork();
  const second = await createOrganization(em, 'Second Org');
  secondOrgId = second.id;
  await setMembership(em, second.id, account.userId, 8);
  secondOrgProject = (await createProject(em, second.id, 'In second org')).id;
  extraProject = (await createProject(em, account.organizationId, 'Extra')).id;
});
afterAll(() => api.close());

const ids = (body: any) => body.results.map((r: any) => r.id).sort();
const get = (path: string, key = account.apiKey) => call(api.baseUrl, 'GET', path, { key });

describe('organizations', () => {
  it("lists the user's organizations with PostHog's fields, each with its projects", async () => {
    const res = await get('/api/organizations/');
    expect(res.status).toBe(200);
    expect(ids(res.body)).toEqual([account.organizationId, secondOrgId].sort());
    const first = res.body.results.find((o: any) => o.id === account.organizationId);
    expect(first).toMatchObject({ membership_level: 1, member_count: 1, slug: expect.stringMatching(/^org-/) });
    expect(first.teams.map((t: any) => t.id).sort()).toEqual([account.projectId, extraProject].sort());
    expect(first.projects.map((p: any) => p.id).sort()).toEqual([account.projectId, extraProject].sort());
    expect(res.body.results.find((o: any) => o.id === secondOrgId)).toMatchObject({
      name: 'Second Org',
      membership_level: 8,
    });
    expect(JSON.stringify(res.body)).not.toContain(other.organizationId);
    const paged = await get('/api/organizations/?limit=1');
    expect(paged.body).toMatchObject({ count: 2, previous: null });
    expect(paged.body.results).toHaveLength(1);
    expect(paged.body.next).toContain('offset=1');
  });

  it('retrieves one by uuid or @current; unknown and foreign organizations are 404', async () => {
    const one = await get(`/api/organizations/${secondOrgId}/`);
    expect(one.status).toBe(200);
    expect(one.body.projects).toEqual([{ id: secondOrgProject, name: 'In second org', organization: secondOrgId }]);
    expect((await get('/api/organizations/@current/')).body.id).toBe(account.organizationId);
    for (const id of [other.organizationId, '00000000-0000-0000-0000-000000000000', 'not-a-uuid']) {
      const res = await get(`/api/organizations/${id}/`);
      expect(res.status, id).toBe(404);
      expect(res.body).toEqual({
        type: 'invalid_request',
        code: 'not_found',
        detail: 'Organization not found.',
        attr: null,
      });
    }
    const projects = await get(`/api/organizations/${account.organizationId}/projects/`);
    expect(ids(projects.body)).toEqual([account.projectId, extraProject].sort());
    expect(projects.body.results[0]).toMatchObject({
      organization: account.organizationId,
      api_token: expect.stringMatching(/^phc_/),
    });
    expect((await get(`/api/organizations/${other.organizationId}/projects/`)).status).toBe(404);
  });

  it('needs organization:read, and names it when missing', async () => {
    const key = await createKey(api.orm, account.userId, { scopes: ['project:read'] });
    const res = await get('/api/organizations/', key);
    expect(res.status).toBe(403);
    expect(res.body.detail).toBe("API key missing required scope 'organization:read'");
    expect((await get(`/api/organizations/${account.organizationId}/projects/`, key)).status).toBe(200);
  });

  it('an organization-scoped key sees only that organization, in every list', async () => {
    const key = await createKey(api.orm, account.userId, { scopedOrganizations: [secondOrgId] });
    expect(ids((await get('/api/organizations/', key)).body)).toEqual([secondOrgId]);
    expect(ids((await get('/api/projects/', key)).body)).toEqual([secondOrgProject]);
    const denied = await get(`/api/organizations/${account.organizationId}/`, key);
    expect(denied.status).toBe(403);
    expect(denied.body.detail).toBe(
      `API key does not have access to the requested organization: ID ${account.organizationId}.`,
    );
    expect((await get(`/api/organizations/${account.organizationId}/projects/`, key)).status).toBe(403);
    const me = (await get('/api/users/@me/', key)).body;
    expect(me.organizations.map((o: any) => o.id)).toEqual([secondOrgId]);
    expect(me.organization.id).toBe(secondOrgId);
    expect(me.team.id).toBe(secondOrgProject);
    expect((await get('/api/organizations/@current/', key)).body.id).toBe(secondOrgId);
  });

  it("a project-scoped key sees only its project and that project's organization (PostHog answers 403 on lists)", async () => {
    const key = await createKey(api.orm, account.userId, { scopedTeams: [extraProject] });
    expect(ids((await get('/api/projects/', key)).body)).toEqual([extraProject]);
    expect(ids((await get('/api/organizations/', key)).body)).toEqual([account.organizationId]);
    const org = (await get(`/api/organizations/${account.organizationId}/`, key)).body;
    expect(org.teams.map((t: any) => t.id)).toEqual([extraProject]);
    expect(ids((await get(`/api/organizations/${account.organizationId}/projects/`, key)).body)).toEqual([
      extraProject,
    ]);
    expect((await get(`/api/organizations/${secondOrgId}/`, key)).status).toBe(403);
    const me = (await get('/api/users/@me/', key)).body;
    expect(me.organizations.map((o: any) => o.id)).toEqual([account.organizationId]);
    expect(me.team.id).toBe(extraProject);
  });

  it('refuses key management with a personal API key, as PostHog does', async () => {
    for (const [method, path] of [
      ['GET', '/api/personal_api_keys/'],
      ['POST', '/api/personal_api_keys/'],
      ['DELETE', '/api/personal_api_keys/abc/'],
      ['POST', '/api/personal_api_keys/abc/roll/'],
      ['PATCH', '/api/personal_api_keys/@current/'],
      ['DELETE', '/api/personal_api_keys/@current/'],
    ]) {
      const res = await call(api.baseUrl, method, path, {
        key: account.apiKey,
        body: method === 'POST' ? { label: 'x', scopes: ['*'] } : undefined,
      });
      expect(res.status, `${method} ${path}`).toBe(403);
      expect(res.body.detail).toBe('This action does not support Personal API Key access');
    }
    expect((await get('/api/personal_api_keys/@current/')).status).toBe(200);
  });
});
