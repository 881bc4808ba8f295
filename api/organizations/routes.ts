// /api/organizations/…: the organizations a key can reach and their projects, in PostHog's shapes
// (PostHog's agent toolkit and other clients find their bearings here).
import { PAGE_QUERY_PROPERTIES, paginatedList, paginatedSchema } from '../http/pagination.ts';
import { defineRoute } from '../http/routes.ts';
import { projectDetail, projectDetailSchema } from '../projects/serializers.ts';
import { organizationDetail, organizationDetailSchema } from './serializers.ts';
import { resolveOrganization, visibleOrganizations, visibleProjects } from './visibility.ts';

const organizationParam = "A uuid, or `@current` for the user's current organization";

export const organizationRoutes = [
  defineRoute({
    method: 'GET',
    path: '/api/organizations',
    summary: 'List the organizations the key can reach',
    tags: ['organizations'],
    scopes: ['organization:read'],
    query: { type: 'object', properties: PAGE_QUERY_PROPERTIES },
    responses: { 200: { description: 'A page of organizations', schema: paginatedSchema(organizationDetailSchema) } },
    handler: async (ctx) => {
      const key = ctx.state.auth;
      const [organizations, projects] = await Promise.all([
        visibleOrganizations(ctx.state.em, key),
        visibleProjects(ctx.state.em, key),
      ]);
      const items = organizations.map((o) =>
        organizationDetail(
          o,
          projects.filter((p) => p.organization_id === o.id),
        ),
      );
      ctx.body = paginatedList(ctx, items);
    },
  }),
  defineRoute({
    method: 'GET',
    path: '/api/organizations/:organization_id',
    summary: `Retrieve an organization (${organizationParam})`,
    tags: ['organizations'],
    scopes: ['organization:read'],
    responses: {
      200: { description: 'The organization', schema: organizationDetailSchema },
      404: { description: 'Organization not found.' },
    },
    handler: async (ctx) => {
      const organization = await resolveOrganization(ctx.state.em, ctx.state.auth, ctx.state.params.organization_id);
      ctx.body = organizationDetail(organization, await visibleProjects(ctx.state.em, ctx.state.auth, organization.id));
    },
  }),
  defineRoute({
    method: 'GET',
    path: '/api/organizations/:organization_id/projects',
    summary: `List an organization's projects that the key can reach (${organizationParam})`,
    tags: ['organizations', 'projects'],
    scopes: ['project:read'],
    query: { type: 'object', properties: PAGE_QUERY_PROPERTIES },
    responses: {
      200: {
        description: 'A page of projects',
        schema: paginatedSchema(projectDetailSchema),
      },
      404: { description: 'Organization not found.' },
    },
    handler: async (ctx) => {
      const organization = await resolveOrganization(ctx.state.em, ctx.state.auth, ctx.state.params.organization_id);
      ctx.body = paginatedList(
        ctx,
        (await visibleProjects(ctx.state.em, ctx.state.auth, organization.id)).map(projectDetail),
      );
    },
  }),
];
