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
  return `${route.path.replace(':project_id', String(projectId)).replace(/:[a-z_]+/g, '00000000-0000-0000-0000-000000000000')}/`;
}
const hasBody = (route: RouteDefinition) => ['POST', 'PATCH', 'PUT'].includes(route.method);
const request = (route: RouteDefinition, key: string | undefined, projectId = account.projectId) =>
  call(api.baseUrl, route.method, pathFor(route, projectId), { key, body: hasBody(route) ? {} : undefined });

/** A scope the route does not need (so a key holding only it lacks the route's scopes). */
const unrelatedScope = (route: RouteDefinition) =>
  route.scopes!.some((s) => s.startsWith('cohort:')) ? 'experiment:read' : 'cohort:read';

// Each case exists only for the routes it applies to, so every generated test asserts something.
const cases = (routes: RouteDefinition[]) => routes.map((r) => [`${r.method} ${r.path}`, r] as const);
const scoped = authenticated.filter((r) => r.scopes!.length > 0);
const writing = authenticated.filter((r) => r.scopes!.some((s) => s.endsWith(':write')));
const personalKeyRoutes = authenticated.filter((r) => r.personalApiKeyAccess !== false);
const sessionOnlyRoutes = authenticated.filter((r) => r.personalApiKeyAccess === false);
const projectRoutes = authenticated.filter((r) => r.path.includes(':project_id'));

describe.each(cases(authenticated))('%s', (_name, route) => {
  it('answers 401 without a key', async () => {
    const res = await request(route, undefined);
    expect(res.status).toBe(401);
    expect(res.body.code).toBe('not_authenticated');
  });
});

describe.each(cases(scoped))('%s', (_name, route) => {
  it('answers 403 naming a missing scope', async () => {
    const key = await createKey(api.orm, account.userId, { scopes: [unrelatedScope(route)] });
    const res = await request(route, key);
    expect(res.status).toBe(403);
    expect(res.body.detail).toMatch(/^API key missing required scope '[a-z_]+:(read|write)'$/);
  });
});

describe.each(cases(writing))('%s', (_name, route) => {
  it('refuses a read-only key on a route that needs a write scope', async () => {
    const writes = route.scopes!.filter((s) => s.endsWith(':write'));
    const key = await createKey(api.orm, account.userId, {
      scopes: route.scopes!.map((s) => s.replace(':write', ':read')),
    });
    const res = await request(route, key);
    expect(res.status).toBe(403);
    expect(res.body.detail).toBe(`API key missing required scope '${writes[0]}'`);
  });
});

describe.each(cases(personalKeyRoutes))('%s', (_name, route) => {
  it('lets exactly the required scopes and `*` through, where a key without them is stopped', async () => {
    // The same path is guarded (401 without a key; 403 with an unrelated scope where the route needs
    // one), so what the right keys get below is the route's own answer, not "no such route".
    expect((await request(route, undefined)).status).toBe(401);
    if (route.scopes!.length > 0) {
      const unrelated = await createKey(api.orm, account.userId, { scopes: [unrelatedScope(route)] });
      expect((await request(route, unrelated)).status).toBe(403);
    }
    for (const scopes of [route.scopes!.length ? route.scopes! : ['experiment:read'], ['*']]) {
      const key = await createKey(api.orm, account.userId, { scopes });
      const res = await request(route, key);
      expect([401, 403, 500], `${scopes} → ${res.status} ${res.text}`).not.toContain(res.status);
    }
  });
});

describe.each(cases(sessionOnlyRoutes))('%s', (_name, route) => {
  it('refuses personal API keys, as PostHog does', async () => {
    const res = await request(route, account.apiKey);
    expect(res.status).toBe(403);
    expect(res.body.detail).toBe('This action does not support Personal API Key access');
  });
});

describe.each(cases(projectRoutes))('%s', (_name, route) => {
  it("refuses another organization's project, and a key scoped to another project", async () => {
    const res = await request(route, account.apiKey, other.projectId);
    expect(res.status).toBe(403);
    expect(res.body.detail).toBe("You don't have access to the project.");
    const scopedKey = await createKey(api.orm, other.userId, { scopedTeams: [other.projectId + 1_000_000] });
    const scopedRes = await request(route, scopedKey, other.projectId);
    expect(scopedRes.status).toBe(403);
    expect(scopedRes.body.detail).toBe(`API key does not have access to the requested project: ID ${other.projectId}.`);
  });
});

it('covers every authenticated route', () => {
  expect(authenticated.length).toBeGreaterThan(50);
  expect(personalKeyRoutes.length + sessionOnlyRoutes.length).toBe(authenticated.length);
});
