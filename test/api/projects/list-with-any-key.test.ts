// Seed: "The ID of a project is obtained with a call to /api/projects/", and no seed scope is
// project:read. So any valid personal API key lists the projects it reaches, scoping kept.
import { describe, expect, it } from 'vitest';
import { createProject } from '../../../shared/accounts/service.ts';
import { apiWithAccount, call, createAccount, createKey } from '../../helpers.ts';

const { api, account } = await apiWithAccount();
const second = await createProject(api.orm.em.fork(), account.organizationId, 'Second');
const stranger = await createAccount(api.orm); // another organization, never listed
const SEED_SCOPES = [
  'experiment:read',
  'experiment:write',
  'person:read',
  'person:write',
  'activity_log:read',
  'cohort:read',
  'event_definition:read',
  'event_definition:write',
];
const listed = async (key: string) => {
  const res = await call(api.baseUrl, 'GET', '/api/projects/', { key });
  expect(res.status, res.text).toBe(200);
  return res.body.results.map((p: any) => p.id).sort((a: number, b: number) => a - b);
};

describe('GET /api/projects/ with seed scopes only', () => {
  it('lists the user’s projects for a key holding any one seed scope, and for all of them', async () => {
    const all = [account.projectId, second.id].sort((a, b) => a - b);
    for (const scope of SEED_SCOPES) {
      expect(await listed(await createKey(api.orm, account.userId, { scopes: [scope] }))).toEqual(all);
    }
    expect(await listed(await createKey(api.orm, account.userId, { scopes: SEED_SCOPES }))).toEqual(all);
    expect(all).not.toContain(stranger.projectId);
  });

  it('keeps the key’s project and organization scoping', async () => {
    const scoping = { scopes: ['person:read'], scopedTeams: [second.id] };
    const projectScoped = await createKey(api.orm, account.userId, scoping);
    expect(await listed(projectScoped)).toEqual([second.id]);
    const otherOrg = await createKey(api.orm, account.userId, {
      scopes: ['experiment:read'],
      scopedOrganizations: [stranger.organizationId],
    });
    expect(await listed(otherOrg)).toEqual([]);
  });

  it('still needs a valid key, and retrieving one project still needs project:read', async () => {
    const invalid = await call(api.baseUrl, 'GET', '/api/projects/', { key: 'phx_not_a_key' });
    expect(invalid.status).toBe(401);
    expect((await call(api.baseUrl, 'GET', '/api/projects/')).status).toBe(401);
    const key = await createKey(api.orm, account.userId, { scopes: ['person:read'] });
    const retrieve = await call(api.baseUrl, 'GET', `/api/projects/${account.projectId}/`, { key });
    expect(retrieve.status).toBe(403);
  });
});
