import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { allRoutes } from '../../../api/routes.ts';
import { openApiPath } from '../../../api/openapi/document.ts';
import { launchChromium } from '../../browser.ts';
import { call, startApi, type TestApi } from '../../helpers.ts';

let api: TestApi;
beforeAll(async () => {
  api = await startApi();
});
afterAll(() => api.close());

describe('GET /api/schema/', () => {
  it('documents every declared route with its scopes, parameters and responses', async () => {
    const res = await call(api.baseUrl, 'GET', '/api/schema/');
    expect(res.status).toBe(200);
    expect(res.body.openapi).toBe('3.1.0');
    for (const route of allRoutes) {
      const operation = res.body.paths[openApiPath(route.path)]?.[route.method.toLowerCase()];
      expect(operation, `${route.method} ${route.path}`).toBeDefined();
      expect(operation['x-required-scopes']).toEqual(route.scopes ?? []);
      const pathParams = operation.parameters.filter((p: any) => p.in === 'path').map((p: any) => p.name);
      expect(pathParams).toEqual([...route.path.matchAll(/:([A-Za-z_]+)/g)].map((m) => m[1]));
    }
    const ids = Object.values(res.body.paths).flatMap((methods: any) =>
      Object.values(methods).map((op: any) => op.operationId),
    );
    expect(new Set(ids).size).toBe(ids.length);
  });
});

describe('GET /api/docs/ in a browser', () => {
  it('renders every operation from this server alone, with an example request that can be read off the page', async () => {
    const browser = await launchChromium();
    try {
      const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
      // Every request the page makes (scripts, styles, fonts, the document itself) must stay on the API's origin.
      const requested: string[] = [];
      page.on('request', (request) => requested.push(request.url()));
      const response = await page.goto(`${api.baseUrl}/api/docs/`, { waitUntil: 'networkidle' });
      expect(response?.status()).toBe(200);
      const paths = await page.locator('code.path').allTextContents();
      for (const route of allRoutes) expect(paths).toContain(openApiPath(route.path));
      const projectsSection = page.locator('section.op', {
        has: page.locator('code.path', { hasText: /^\/api\/projects\/\{project_id\}\/$/ }),
      });
      const example = await projectsSection.locator('pre.example').textContent();
      expect(example).toContain(`curl -X GET '${api.baseUrl}/api/projects/@current/'`);
      expect(example).toContain('Authorization: Bearer');
      expect(await projectsSection.locator('.scopes').textContent()).toContain('project:read');

      // What a person sees first: a PNG of the viewport, kept for looking at, with operations on it.
      const file = join(tmpdir(), `api-docs-${process.pid}.png`);
      const png = await page.screenshot({ path: file });
      expect(png.subarray(1, 4).toString()).toBe('PNG');
      expect(await page.locator('section.op').first().isVisible()).toBe(true);

      expect(requested.length).toBeGreaterThan(0);
      const origin = new URL(api.baseUrl).origin;
      expect(requested.filter((url) => !url.startsWith('data:') && new URL(url).origin !== origin)).toEqual([]);
    } finally {
      await browser.close();
    }
  });
});
