// Routes are matched within groups of shared leading path segments (api/http/routes.ts buildRouter). A
// request whose narrowest group holds no route for it must go on to the broader group that does, and
// 404/405 must be answered as with one router. Routes declared only for this test.
import type { Server } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApp } from '../../../api/app.ts';
import { defineRoute } from '../../../api/http/routes.ts';
import { allRoutes } from '../../../api/routes.ts';
import { call, serveApp, startApi, type TestApi } from '../../helpers.ts';

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

// `/test_groups/fixed/deeper` makes a group `test_groups/fixed`; `/test_groups/fixed` itself is served by
// the parameterised route of the broader group `test_groups`.
const routes = [
  answering('/test_groups/:id', 'param'),
  answering('/test_groups/fixed/deeper', 'deeper'),
  answering('/test_groups/:id/:part/:more', 'three'),
];

let api: TestApi;
let server: Server;
let baseUrl: string;
beforeAll(async () => {
  api = await startApi();
  ({ server, baseUrl } = await serveApp(createApp(api.deps, [...allRoutes, ...routes])));
});
afterAll(async () => {
  await new Promise((resolve) => server.close(resolve));
  await api.close();
});

describe('route groups', () => {
  it('fall back from a narrower group without a match to the broader one', async () => {
    const fixed = await call(baseUrl, 'GET', '/test_groups/fixed');
    expect(fixed.status).toBe(200);
    expect(fixed.body).toEqual({ route: 'param', params: { id: 'fixed' } });
    const deeper = await call(baseUrl, 'GET', '/test_groups/fixed/deeper/');
    expect(deeper.body).toEqual({ route: 'deeper', params: {} });
    const three = await call(baseUrl, 'GET', '/test_groups/fixed/x/y');
    expect(three.body).toEqual({ route: 'three', params: { id: 'fixed', part: 'x', more: 'y' } });
  });

  it('answer 405 for a path routed for other methods and 404 for one routed nowhere, in the error shape', async () => {
    const wrongMethod = await call(baseUrl, 'POST', '/test_groups/fixed', { body: {} });
    expect(wrongMethod.status).toBe(405);
    expect(wrongMethod.body).toMatchObject({ type: 'invalid_request', code: 'method_not_allowed' });
    const nowhere = await call(baseUrl, 'GET', '/test_groups/fixed/x');
    expect(nowhere.status).toBe(404);
    expect(nowhere.body).toMatchObject({ type: 'invalid_request', code: 'not_found' });
  });
});
