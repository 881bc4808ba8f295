// PostHog's own agent toolkit (@posthog/agent-toolkit, the code behind PostHog's MCP server) pointed
// at us with nothing but the base URL and a key: it discovers the user, organization, project and
// key scopes from our introspection endpoints, picks its tools by scope, and the tools work.
import { PostHogAgentToolkit } from '@posthog/agent-toolkit/tools';
import { describe, expect, it } from 'vitest';
import { createProject } from '../../../shared/accounts/service.ts';
import { capture } from '../../fixtures.ts';
import { apiWithAccount, call, createKey } from '../../helpers.ts';

const { api, account } = await apiWithAccount();

async function toolkit(key: string) {
  const kit = new PostHogAgentToolkit({ posthogApiToken: key, posthogApiBaseUrl: api.baseUrl });
  const context = kit.getContext();
  const tools = await kit.getTools();
  const run = async (name: string, params: Record<string, unknown> = {}) => {
    const tool = tools.find((t) => t.name === name);
    if (!tool) throw new Error(`tool ${name} not offered`);
    const result: any = await tool.handler(context, params as any);
    return JSON.parse(result.content[0].text);
  };
  return { tools: tools.map((t) => t.name), run, context };
}

describe('PostHog agent toolkit against this API', () => {
  it('discovers organization and project from the key alone and runs its tools', async () => {
    await capture(api.baseUrl, account.projectToken, [{ event: 'signed_up', distinct_id: 'agent-user' }]);
    const created = await call(api.baseUrl, 'POST', `/api/projects/${account.projectId}/experiments/`, {
      key: account.apiKey,
      body: { name: 'Agent visible', feature_flag_key: 'agent-visible' },
    });
    expect(created.status).toBe(201);

    const kit = await toolkit(account.apiKey);
    expect(kit.tools).toEqual(
      expect.arrayContaining([
        'organizations-get',
        'organization-details-get',
        'projects-get',
        'event-definitions-list',
        'experiment-get-all',
        'experiment-get',
      ]),
    );
    expect(await kit.context.stateManager.getOrgID()).toBe(account.organizationId);
    expect(await kit.context.stateManager.getProjectId()).toBe(String(account.projectId));

    expect((await kit.run('organizations-get')).map((o: any) => o.id)).toEqual([account.organizationId]);
    expect((await kit.run('organization-details-get')).id).toBe(account.organizationId);
    expect((await kit.run('projects-get')).map((p: any) => p.id)).toEqual([account.projectId]);
    expect((await kit.run('event-definitions-list', {})).map((d: any) => d.name)).toContain('signed_up');
    const experiments = await kit.run('experiment-get-all');
    expect(experiments.map((e: any) => e.name)).toEqual(['Agent visible']);
    expect((await kit.run('experiment-get', { experimentId: created.body.id })).feature_flag_key).toBe('agent-visible');
  });

  it('offers only the tools the key has scopes for, and a project-scoped key lands in its project', async () => {
    const second = await createProject(api.orm.em.fork(), account.organizationId, 'Agent second');
    const key = await createKey(api.orm, account.userId, {
      scopes: ['experiment:read', 'organization:read', 'project:read', 'user:read'],
      scopedTeams: [second.id],
    });
    const kit = await toolkit(key);
    expect(kit.tools).toContain('experiment-get-all');
    expect(kit.tools).not.toContain('event-definitions-list');
    expect(kit.tools).not.toContain('experiment-create');
    expect(await kit.context.stateManager.getProjectId()).toBe(String(second.id));
    expect(await kit.run('experiment-get-all')).toEqual([]);
  });
});
