// The API's router (api/http/routes.ts mountRoutes, on @koa/router): segment-by-segment matching, a literal
// segment winning over a parameter whatever the declaration order, decoded parameters, HEAD on GET routes,
// 404 and 405 in PostHog's error shape, 405 and OPTIONS naming the routed methods in Allow, SDK paths keeping
// their CORS answers, and the route label of the request metric. Routes declared only for this test.
import { Router } from '@koa/router';
import type { Server } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApp } from '../../../api/app.ts';
import { defineRoute, mountRoutes } from '../../../api/http/routes.ts';
import { allRoutes } from '../../../api/routes.ts';
import { call, createAccount, serveApp, startApi, type TestAccount, type TestApi } from '../../helpers.ts';

const answering = (path: string, route: string) =>
  defineRoute({
    method: 'GET',
    path,
    summary: 'test only',
    scopes: null,
    handler: (ctx) => {
      ctx.body = { route, params: ctx.state.params };
    },
  });

// Declared parameter first: the literal `/test_groups/fixed/deeper` must still win where both match.
const routes = [
  answering('/test_groups/:id', 'param'),
  answering('/test_groups/:id/:part', 'two'),
  answering('/test_groups/fixed/deeper', 'deeper'),
  answering('/test_groups/:id/:part/:more', 'three'),
];

let api: TestApi;
let app: ReturnType<typeof createApp>;
let server: Server;
let baseUrl: string;
let account: TestAccount;
beforeAll(async () => {
  api = await startApi();
  account = await createAccount(api.orm);
  app = createApp(api.deps, [...allRoutes, ...routes]);
  ({ server, baseUrl } = await serveApp(app));
});
afterAll(async () => {
  await new Promise((resolve) => server.close(resolve));
  await api.close();
});

describe('router', () => {
  it('matches segment by segment, a literal segment before a parameter', async () => {
    const fixed = await call(baseUrl, 'GET', '/test_groups/fixed');
    expect(fixed.status).toBe(200);
    expect(fixed.body).toEqual({ route: 'param', params: { id: 'fixed' } });
    const deeper = await call(baseUrl, 'GET', '/test_groups/fixed/deeper/');
    expect(deeper.body).toEqual({ route: 'deeper', params: {} });
    const two = await call(baseUrl, 'GET', '/test_groups/fixed/other');
    expect(two.body).toEqual({ route: 'two', params: { id: 'fixed', part: 'other' } });
    const three = await call(baseUrl, 'GET', '/test_groups/fixed/x/y');
    expect(three.body).toEqual({ route: 'three', params: { id: 'fixed', part: 'x', more: 'y' } });
  });

  it('decodes parameters, keeps one that does not decode as it came, and matches no empty segment', async () => {
    const encoded = await call(baseUrl, 'GET', '/test_groups/a%2Fb%20c');
    expect(encoded.body).toEqual({ route: 'param', params: { id: 'a/b c' } });
    const broken = await call(baseUrl, 'GET', '/test_groups/%E0%A4%A');
    expect(broken.body).toEqual({ route: 'param', params: { id: '%E0%A4%A' } });
    const empty = await call(baseUrl, 'GET', '/test_groups//x');
    expect(empty.status).toBe(404);
  });

  it('answers HEAD on a GET route, without a body', async () => {
    const head = await fetch(`${baseUrl}/test_groups/fixed`, { method: 'HEAD' });
    expect(head.status).toBe(200);
    expect(head.headers.get('content-type')).toContain('application/json');
    expect(await head.text()).toBe('');
  });

  it('labels the request metric with the declared route, not the path', async () => {
    await call(baseUrl, 'GET', '/test_groups/metric-label/x');
    const metrics = await app.context.metrics.registry.metrics();
    expect(metrics).toMatch(/http_request_duration_seconds_count\{[^}]*route="\/test_groups\/:id\/:part"/);
    expect(metrics).not.toContain('metric-label');
  });

  it('answer 405 for a path routed for other methods and 404 for one routed nowhere, in the error shape', async () => {
    const wrongMethod = await call(baseUrl, 'POST', '/test_groups/fixed', { body: {} });
    expect(wrongMethod.status).toBe(405);
    expect(wrongMethod.body).toMatchObject({ type: 'invalid_request', code: 'method_not_allowed' });
    const nowhere = await call(baseUrl, 'GET', '/test_groups/fixed/x/y/z');
    expect(nowhere.status).toBe(404);
    expect(nowhere.body).toMatchObject({ type: 'invalid_request', code: 'not_found' });
  });

  it('names the methods a path is routed for in the Allow header of a 405', async () => {
    const wrongMethod = await call(baseUrl, 'POST', '/test_groups/fixed/deeper', { body: {} });
    expect(wrongMethod.status).toBe(405);
    expect(allowed(wrongMethod.headers)).toEqual(['GET', 'HEAD']);
    const persons = await call(baseUrl, 'PUT', '/api/projects/1/persons/', { body: {} });
    expect(persons.status).toBe(405);
    // POST is routed only to answer 405 (persons are created by ingestion): it is not allowed.
    expect(allowed(persons.headers)).toEqual(['GET', 'HEAD']);
  });

  it('names the allowed methods in the 405 a route answers itself, leaving out the methods that always answer 405', async () => {
    const key = account.apiKey;
    const experiment = await call(baseUrl, 'DELETE', `/api/projects/${account.projectId}/experiments/12345/`, { key });
    expect(experiment.status).toBe(405);
    expect(experiment.text).toBe('');
    expect(allowed(experiment.headers)).toEqual(['GET', 'HEAD', 'PATCH', 'PUT']);
    const options = await call(baseUrl, 'OPTIONS', `/api/projects/${account.projectId}/experiments/12345/`);
    expect(options.status).toBe(204);
    expect(allowed(options.headers)).toEqual(['GET', 'HEAD', 'PATCH', 'PUT']);
    const persons = await call(baseUrl, 'POST', `/api/projects/${account.projectId}/persons/`, { key, body: {} });
    expect(persons.status).toBe(405);
    expect(persons.body).toMatchObject({ type: 'invalid_request', code: 'method_not_allowed' });
    expect(allowed(persons.headers)).toEqual(['GET', 'HEAD']);
  });

  it('a path a literal route owns is not taken for a parameter by another method: 405 with its own methods', async () => {
    const key = account.apiKey;
    const bulk = await call(baseUrl, 'GET', `/api/projects/${account.projectId}/persons/bulk_delete/`, { key });
    expect(bulk.status).toBe(405);
    expect(bulk.body).toMatchObject({ type: 'invalid_request', code: 'method_not_allowed' });
    expect(allowed(bulk.headers)).toEqual(['POST']);
    const options = await call(baseUrl, 'OPTIONS', `/api/projects/${account.projectId}/persons/bulk_delete/`);
    expect(allowed(options.headers)).toEqual(['POST']);
    // A person's own path still answers every method it is routed for.
    const person = await call(baseUrl, 'GET', `/api/projects/${account.projectId}/persons/12345/`, { key });
    expect(person.status).toBe(404);
  });

  it('answers OPTIONS on an API path with 204 and the Allow header, and 404 where nothing is routed', async () => {
    const options = await call(baseUrl, 'OPTIONS', '/test_groups/fixed/deeper/');
    expect(options.status).toBe(204);
    expect(options.text).toBe('');
    expect(allowed(options.headers)).toEqual(['GET', 'HEAD']);
    const person = await call(baseUrl, 'OPTIONS', '/api/projects/1/persons/5/');
    expect(person.status).toBe(204);
    expect(allowed(person.headers)).toEqual(['DELETE', 'GET', 'HEAD', 'PATCH', 'PUT']);
    const nowhere = await call(baseUrl, 'OPTIONS', '/test_groups/fixed/x/y/z');
    expect(nowhere.status).toBe(404);
    expect(nowhere.body).toMatchObject({ type: 'invalid_request', code: 'not_found' });
  });

  it("keeps the SDK paths' CORS answers: the preflight, and a 405 with CORS and Allow", async () => {
    const origin = { origin: 'https://app.example.com' };
    const preflight = await call(baseUrl, 'OPTIONS', '/batch/', { headers: origin });
    expect(preflight.status).toBe(204);
    expect(preflight.headers.get('access-control-allow-origin')).toBe('https://app.example.com');
    expect(preflight.headers.get('access-control-allow-methods')).toBe('GET, POST, OPTIONS');
    const wrongMethod = await call(baseUrl, 'PUT', '/e/', { headers: origin });
    expect(wrongMethod.status).toBe(405);
    expect(wrongMethod.headers.get('access-control-allow-origin')).toBe('https://app.example.com');
    expect(allowed(wrongMethod.headers)).toEqual(['GET', 'HEAD', 'OPTIONS', 'POST']);
    expect(wrongMethod.body).toMatchObject({ type: 'invalid_request', code: 'method_not_allowed' });
  });
});

/** The methods of an Allow header, sorted. */
const allowed = (headers: Headers) =>
  (headers.get('allow') ?? '')
    .split(',')
    .map((method) => method.trim())
    .filter(Boolean)
    .sort();

describe('route matching by segment count', () => {
  it("finds what the router's own match over every route finds, for every route's paths and their neighbours", () => {
    const router = mountRoutes(allRoutes);
    const everyRoute = (path: string, method: string) => Router.prototype.match.call(router, path, method);
    const shown = (found: ReturnType<Router['match']>) => ({
      path: found.path.map((layer) => layer.path),
      pathAndMethod: found.pathAndMethod.map((layer) => layer.path),
      route: found.route,
    });
    const paths = new Set(['/', '/nothing', '/api', '/api/projects/1/nothing/2/3/4/5/6']);
    for (const route of allRoutes)
      for (const value of ['123', '@current', 'bulk_delete', 'a%2Fb']) {
        const path = route.path.replace(/:\w+/g, value);
        for (const variant of [
          path,
          `${path}/`,
          `${path}/extra`,
          path.split('/').slice(0, -1).join('/'),
          path.replace('/api/', '/api//'),
        ])
          paths.add(variant || '/');
      }
    for (const path of paths)
      for (const method of ['GET', 'HEAD', 'POST', 'PATCH', 'PUT', 'DELETE', 'OPTIONS'])
        expect(shown(router.match(path, method)), `${method} ${path}`).toEqual(shown(everyRoute(path, method)));
    // A literal path's answer is kept, but each call gets arrays of its own (the router keeps them on the context).
    const [first, second] = [router.match('/flags', 'POST'), router.match('/flags', 'POST')];
    expect(first.path).not.toBe(second.path);
    expect(first.pathAndMethod).not.toBe(second.pathAndMethod);
  });
});
