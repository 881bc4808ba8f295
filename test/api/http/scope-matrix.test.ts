// Every declared route × (no key, key scoped to another project, key missing a scope, read-only key,
// exactly the required scopes, `*`): the answer follows the route's declared scopes, and never 500.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { allRoutes } from '../../../api/routes.ts';
import type { RouteDefinition } from '../../../api/http/routes.ts';
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

const authenticated = allRoutes.filter((r) => r.scopes !== null);

function pathFor(route: RouteDefinition, projectId: number): string {
  return route.path.replace(':project_id', String(projectId)).replace(/:[a-z_]+/g, '00000000-0000-0000-0000-000000000000') + '/';
}
const hasBody = (route: RouteDefinition) => ['POST', 'PATCH', 'PUT'].includes(route.method);
const request = (route: RouteDefinition, key: string | undefined, projectId = account.projectId) =>
  call(api.baseUrl, route.method, pathFor(route, projectId), { key, body: hasBody(route) ? {} : undefined });

/** A scope the route does not need (so a key holding only it lacks the route's scopes). */
const unrelatedScope = (route: RouteDefinition) => (route.scopes!.some((s) => s.startsWith('cohort:')) ? 'experiment:read' : 'cohort:read');

describe.each(authenticated.map((r) => [`${r.method} ${r.path}`, r] as const))('%s', (_name, route) => {
  it('answers 401 without a key', async () => {
    const res = await request(route, undefined);
    expect(res.status).toBe(401);
    expect(res.body.code).toBe('not_authenticated');
  });

  it('answers 403 naming a missing scope', async () => {
    if (route.scopes!.length === 0) return; // the seed lists no scope: any valid key
    const key = await createKey(api.orm, account.userId, { scopes: [unrelatedScope(route)] });
    const res = await request(route, key);
    expect(res.status).toBe(403);
    expect(res.body.detail).toMatch(/^API key missing required scope '[a-z_]+:(read|write)'$/);
  });

  it('refuses a read-only key on a route that needs a write scope', async () => {
    const writes = route.scopes!.filter((s) => s.endsWith(':write'));
    if (writes.length === 0) return;
    const key = await createKey(api.orm, account.userId, { scopes: route.scopes!.map((s) => s.replace(':write', ':read')) });
    const res = await request(route, key);
    expect(res.status).toBe(403);
    expect(res.body.detail).toBe(`API key missing required scope '${writes[0]}'`);
  });

  it('lets exactly the required scopes and `*` through (no 401/403, no 500)', async () => {
    if (route.personalApiKeyAccess === false) {
      const res = await request(route, account.apiKey);
      expect(res.status).toBe(403);
      expect(res.body.detail).toBe('This action does not support Personal API Key access');
      return;
    }
    for (const scopes of [route.scopes!.length ? route.scopes! : ['experiment:read'], ['*']]) {
      const key = await createKey(api.orm, account.userId, { scopes });
      const res = await request(route, key);
      expect([401, 403, 500], `${scopes} → ${res.status} ${res.text}`).not.toContain(res.status);
    }
  });

  it("refuses another organization's project, and a key scoped to another project", async () => {
    if (!route.path.includes(':project_id')) return;
    const res = await request(route, account.apiKey, other.projectId);
    expect(res.status).toBe(403);
    expect(res.body.detail).toBe("You don't have access to the project.");
    const scoped = await createKey(api.orm, other.userId, { scopedTeams: [other.projectId + 1_000_000] });
    const scopedRes = await request(route, scoped, other.projectId);
    expect(scopedRes.status).toBe(403);
    expect(scopedRes.body.detail).toBe(`API key does not have access to the requested project: ID ${other.projectId}.`);
  });
});
