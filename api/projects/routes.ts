import { PAGE_QUERY_PROPERTIES, paginatedList, paginatedSchema } from '../http/pagination.ts';
import { defineRoute } from '../http/routes.ts';
import { projectBasic, projectBasicSchema, projectDetail, projectDetailSchema } from './serializers.ts';
import { visibleProjects } from '../organizations/visibility.ts';
import { actorOf } from '../http/routes.ts';
import { projectWithMembershipOf } from '../../shared/accounts/index.ts';
import { updateProjectSettings } from '../../shared/retention/index.ts';
import { notFound } from '../http/errors.ts';
import { updateBody } from './schemas.ts';

export const projectRoutes = [
  defineRoute({
    method: 'GET',
    path: '/api/projects',
    summary: 'List the projects the key can reach (how a client finds its project id)',
    tags: ['projects'],
    // The seed finds project ids here, yet grants no project:read: any valid key lists what it reaches.
    scopes: [],
    query: { type: 'object', properties: PAGE_QUERY_PROPERTIES },
    responses: { 200: { description: 'A page of projects', schema: paginatedSchema(projectBasicSchema) } },
    // Unlike PostHog (403 for project-scoped keys, which broke clients), every key lists what it can reach.
    handler: async (ctx) => {
      ctx.body = paginatedList(ctx, (await visibleProjects(ctx.state.em, ctx.state.auth)).map(projectBasic));
    },
  }),
  defineRoute({
    method: 'GET',
    path: '/api/projects/:project_id',
    summary: 'Retrieve a project',
    tags: ['projects'],
    scopes: ['project:read'],
    responses: {
      200: {
        description: 'The project',
        schema: projectDetailSchema,
      },
      404: { description: 'Project not found.' },
    },
    handler: (ctx) => {
      ctx.body = projectDetail(ctx.state.project);
    },
  }),
  defineRoute({
    method: 'PATCH',
    path: '/api/projects/:project_id',
    summary: 'Update a project: its name and how many days of events and recordings to keep',
    tags: ['projects'],
    scopes: ['project:write'],
    body: updateBody,
    responses: {
      200: { description: 'The updated project', schema: projectDetailSchema },
      400: { description: 'A retention of 0 or fewer days, or another invalid value (attr names the field)' },
      404: { description: 'Project not found.' },
    },
    handler: async (ctx) => {
      const em = ctx.state.em;
      await updateProjectSettings(em.fork(), actorOf(ctx), ctx.state.body);
      const project = await projectWithMembershipOf(em, ctx.state.auth.userId, ctx.state.project.id);
      if (!project) throw notFound('Project not found.'); // deleted meanwhile
      ctx.body = projectDetail(project);
    },
  }),
];
