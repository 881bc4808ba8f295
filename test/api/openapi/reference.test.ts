import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { allRoutes } from '../../../api/routes.ts';
import { openApiPath } from '../../../api/openapi/document.ts';
import { REDOC_VERSION } from '../../../api/openapi/page.ts';
import { launchChromium } from '../../browser.ts';
import { call, startApi, type TestApi } from '../../helpers.ts';
import { localOnlyPage } from '../ops/local-only.ts';
import { missingPackage } from '../../packages.ts';

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

describe('GET /api/docs/', () => {
  it("serves Redoc's bundle from this server, versioned, long cached and gzipped", async () => {
    const page = await call(api.baseUrl, 'GET', '/api/docs/');
    expect(page.status).toBe(200);
    expect(page.headers.get('content-security-policy')).toContain("default-src 'none'");
    const src = /<script src='([^']+)'/.exec(page.text)?.[1];
    expect(src).toBe(`/api/docs/redoc.standalone.js?v=${REDOC_VERSION}`);
    // Nothing on the page points elsewhere (the schema is fetched from this server too).
    expect(page.text).not.toMatch(/https?:/);

    const bundle = await fetch(`${api.baseUrl}${src}`, { headers: { 'accept-encoding': 'gzip' } });
    expect(bundle.status).toBe(200);
    expect(bundle.headers.get('content-type')).toContain('javascript');
    expect(bundle.headers.get('cache-control')).toBe('public, max-age=31536000, immutable');
    expect(bundle.headers.get('content-encoding')).toBe('gzip');
    const compressed = Number(bundle.headers.get('content-length'));
    const text = await bundle.text();
    expect(text).toContain(`"${REDOC_VERSION}"`);
    expect(compressed).toBeLessThan(text.length / 2);
    // (fetch itself would add `Cache-Control: no-cache` to a conditional request, as a browser reload does.)
    const revalidate = { 'if-none-match': bundle.headers.get('etag')!, 'cache-control': 'max-age=0' };
    const again = await fetch(`${api.baseUrl}${src}`, { headers: revalidate });
    expect(again.status).toBe(304);
  });
});

describe.skipIf(missingPackage('chromium'))('GET /api/docs/ in a browser', () => {
  it('renders every operation with Redoc from this server alone, and finds operations by search', async () => {
    const schema = (await call(api.baseUrl, 'GET', '/api/schema/')).body;
    const browser = await launchChromium();
    try {
      const { page, requested, outside } = await localOnlyPage(browser);
      const response = await page.goto(`${api.baseUrl}/api/docs/`);
      expect(response?.status()).toBe(200);
      // Redoc renders 100-odd operations in the browser: slow on a loaded machine.
      await page.locator('.menu-content').waitFor({ timeout: 60_000 });
      const rendered = await page.locator('[id^="operation/"]').evaluateAll((els) => els.map((e) => e.id));
      for (const route of allRoutes) {
        const operation = schema.paths[openApiPath(route.path)][route.method.toLowerCase()];
        expect(rendered, `${route.method} ${route.path}`).toContain(`operation/${operation.operationId}`);
      }
      const project = page.locator(
        `[id="tag/projects/operation/${schema.paths['/api/projects/{project_id}/'].get.operationId}"]`,
      );
      expect(await project.textContent()).toContain('/api/projects/{project_id}/');
      expect(await project.textContent()).toContain('project:read');

      // Redoc's search box (its index is built in a worker) lists the matching operations.
      await page.getByRole('search').getByRole('textbox').fill('persons');
      const results = page.locator('[data-role="search:results"]');
      await results.getByText('List persons').waitFor();
      expect(await results.getByText('Retrieve a person by numeric id or uuid').isVisible()).toBe(true);

      // What a person sees: the sidebar with the search and its results, and the document beside it.
      const file = join(mkdtempSync(join(tmpdir(), 'api-docs-')), 'api-docs.png');
      const png = await page.screenshot({ path: file });
      expect(png.subarray(1, 4).toString()).toBe('PNG');
      expect(png.length, file).toBeGreaterThan(40_000);
      const sidebar = await page.locator('.menu-content').boundingBox();
      expect(sidebar).toMatchObject({ x: 0, y: 0 });
      expect(await results.boundingBox()).not.toBeNull();
      expect(await page.getByText(schema.info.title).first().isVisible()).toBe(true);

      expect(requested.some((url) => url.includes('/api/schema/'))).toBe(true);
      expect(outside()).toEqual([]);
    } finally {
      await browser.close();
    }
  }, 120_000);

  it('shows paths whole (underscores too), descriptions with their <id>, and a fitting sample per error status', async () => {
    const schema = (await call(api.baseUrl, 'GET', '/api/schema/')).body;
    const browser = await launchChromium();
    try {
      const { page } = await localOnlyPage(browser);
      await page.goto(`${api.baseUrl}/api/docs/`);
      await page.locator('.menu-content').waitFor({ timeout: 60_000 });
      const path = '/api/projects/{project_id}/persons/bulk_delete/';
      const operation = page.locator(`[id$="operation/${schema.paths[path].post.operationId}"]`).first();
      await operation.scrollIntoViewIfNeeded();
      // The path bar shows its underscores (they were drawn below its box, which clips): the bar looks
      // different once they are taken out.
      const bar = (await operation.getByText(path, { exact: true }).first().elementHandle())!;
      const withUnderscores = await bar.screenshot();
      await bar.evaluate((e) => {
        e.textContent = e.textContent!.replaceAll('_', ' ');
      });
      const without = await bar.screenshot();
      expect(withUnderscores.equals(without), 'the underscores of the path bar are not visible').toBe(false);
      expect(await operation.innerText()).toContain('…/deletion_status/{id}/unsuppress/');

      // Response samples: the 403 tab shows a permission_denied body, the 422 one the reused key.
      for (const [status, code] of [
        ['403', 'permission_denied'],
        ['422', 'idempotency_key_reused'],
        ['401', 'not_authenticated'],
      ]) {
        await operation.getByRole('tab', { name: status, exact: true }).click();
        const sample = operation.getByRole('tabpanel').filter({ hasText: '"type"' }).last();
        expect(await sample.innerText(), status).toContain(`"${code}"`);
        expect(await sample.innerText(), status).not.toContain('validation_error');
      }
    } finally {
      await browser.close();
    }
  }, 120_000);
});
