import { defineRoute, type RouteDefinition } from '../http/routes.ts';
import { buildOpenApiDocument } from './document.ts';
import { renderReferencePage } from './page.ts';

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
      responses: { 200: { description: 'OpenAPI document', schema: { type: 'object', required: ['openapi', 'paths'] } } },
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
