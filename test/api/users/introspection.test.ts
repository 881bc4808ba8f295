import { describe, expect, it } from 'vitest';
import { createProject } from '../../../shared/accounts/service.ts';
import { apiWithAccount, call, createKey } from '../../helpers.ts';

const { api, account } = await apiWithAccount();

describe('introspection', () => {
  it('describes the calling key without its secret, for any valid key', async () => {
    const key = await createKey(api.orm, account.userId, { scopes: ['person:read'], scopedTeams: [account.projectId] });
    const res = await call(api.baseUrl, 'GET', '/api/personal_api_keys/@current', { key });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      label: 'test',
      value: null,
      scopes: ['person:read'],
      scoped_teams: [account.projectId],
      scoped_organizations: [],
    });
    expect(res.body.mask_value).toBe(`phx_...${key.slice(-4)}`);
    expect(res.text).not.toContain(key);
    expect((await call(api.baseUrl, 'GET', '/api/personal_api_keys/@current')).status).toBe(401);
  });

  it('returns the user with organization, organizations and team; scoped keys see only their project', async () => {
    const second = await createProject(api.orm.em.fork(), account.organizationId, 'Second');
    const me = await call(api.baseUrl, 'GET', '/api/users/@me/', { key: account.apiKey });
    expect(me.status).toBe(200);
    expect(me.body).toMatchObject({
      id: account.userId,
      team: { id: account.projectId },
      organization: { id: account.organizationId },
    });
    expect(me.body.organizations.map((o: any) => o.id)).toEqual([account.organizationId]);
    expect(me.body.organization.teams.map((t: any) => t.id).sort()).toEqual([account.projectId, second.id].sort());
    const scoped = await createKey(api.orm, account.userId, { scopedTeams: [second.id] });
    const limited = await call(api.baseUrl, 'GET', '/api/users/@me/', { key: scoped });
    expect(limited.body.organization.teams.map((t: any) => t.id)).toEqual([second.id]);
    expect(limited.body.team.id).toBe(second.id);
  });
});
