import { defineRoute, type RouteDefinition } from '../http/routes.ts';
import { API_TITLE, buildOpenApiDocument } from './document.ts';
import { REDOC_BUNDLE_PATH, REDOC_VERSION, REFERENCE_PAGE_CSP, redocBundle, referencePage } from './page.ts';

// The document's own shape is OpenAPI's; only its entry points are described here.
const OPENAPI_DOCUMENT_SCHEMA = {
  type: 'object',
  required: ['openapi', 'info', 'paths', 'components'],
  additionalProperties: true,
  properties: {
    openapi: { const: '3.1.0' },
    info: { type: 'object', additionalProperties: true },
    servers: { type: 'array', items: { type: 'object', additionalProperties: true } },
    paths: { type: 'object', additionalProperties: true },
    components: { type: 'object', additionalProperties: true },
  },
};

/** The schema and docs routes describe every route of the app, including themselves. */
export function openApiRoutes(allRoutes: () => RouteDefinition[]) {
  const baseUrl = (ctx: { protocol: string; host: string }) => `${ctx.protocol}://${ctx.host}`;
  return [
    defineRoute({
      method: 'GET',
      path: '/api/schema',
      summary: 'The OpenAPI 3.1 document of this API',
      tags: ['reference'],
      scopes: null,
      responses: { 200: { description: 'OpenAPI document', schema: OPENAPI_DOCUMENT_SCHEMA } },
      handler: (ctx) => {
        ctx.body = buildOpenApiDocument(allRoutes(), baseUrl(ctx));
      },
    }),
    defineRoute({
      method: 'GET',
      path: '/api/docs',
      summary: 'Browsable API reference (Redoc, rendering /api/schema/)',
      tags: ['reference'],
      scopes: null,
      responses: { 200: { description: 'HTML page', contentType: 'text/html' } },
      handler: (ctx) => {
        ctx.type = 'text/html; charset=utf-8';
        ctx.set('Content-Security-Policy', REFERENCE_PAGE_CSP);
        ctx.body = referencePage(API_TITLE, '/api/schema/');
      },
    }),
    defineRoute({
      method: 'GET',
      path: REDOC_BUNDLE_PATH,
      summary: `Redoc's standalone script (${REDOC_VERSION}) for the reference page`,
      tags: ['reference'],
      scopes: null,
      responses: { 200: { description: 'JavaScript', contentType: 'text/javascript' } },
      handler: (ctx) => {
        const { raw, gzip } = redocBundle();
        ctx.type = 'text/javascript; charset=utf-8';
        // The page asks for it with Redoc's version in the URL, so a copy never goes stale.
        ctx.set('Cache-Control', 'public, max-age=31536000, immutable');
        ctx.set('ETag', `"redoc-${REDOC_VERSION}"`);
        ctx.vary('Accept-Encoding');
        ctx.status = 200; // ctx.fresh compares only for a 2xx answer
        if (ctx.fresh) {
          ctx.status = 304;
          return;
        }
        if (ctx.acceptsEncodings('gzip', 'identity') === 'gzip') {
          ctx.set('Content-Encoding', 'gzip');
          ctx.body = gzip;
        } else ctx.body = raw;
      },
    }),
  ];
}
