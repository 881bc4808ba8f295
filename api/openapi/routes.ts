import { defineRoute, type RouteDefinition } from '../http/routes.ts';
import { buildOpenApiDocument } from './document.ts';
import { renderReferencePage } from './page.ts';

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
      summary: 'Browsable API reference',
      tags: ['reference'],
      scopes: null,
      responses: { 200: { description: 'HTML page', contentType: 'text/html' } },
      handler: (ctx) => {
        ctx.type = 'text/html; charset=utf-8';
        ctx.body = renderReferencePage(buildOpenApiDocument(allRoutes(), baseUrl(ctx)), baseUrl(ctx));
      },
    }),
  ];
}
