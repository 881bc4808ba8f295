import { permissionDenied } from '../http/errors.ts';
import { PAGE_QUERY_PROPERTIES, pageOf, paginated, paginatedSchema } from '../http/pagination.ts';
import { defineRoute } from '../http/routes.ts';
import type { ProjectRow } from '../http/auth.ts';
import { projectBasic, projectDetail } from './serializers.ts';
import { pgArray } from '../../shared/db/sql.ts';


const projectBasicSchema = {
  type: 'object',
  required: ['id', 'uuid', 'organization', 'api_token', 'name', 'timezone'],
  properties: {
    id: { type: 'integer' },
    uuid: { type: 'string', format: 'uuid' },
    organization: { type: 'string', format: 'uuid' },
    api_token: { type: 'string' },
    name: { type: 'string' },
    completed_snippet_onboarding: { type: 'boolean' },
    has_completed_onboarding_for: { type: ['object', 'null'] },
    ingested_event: { type: 'boolean' },
    is_demo: { type: 'boolean' },
    timezone: { type: 'string' },
    access_control: { type: 'boolean' },
  },
};

export const projectRoutes = [
  defineRoute({
    method: 'GET',
    path: '/api/projects',
    summary: 'List the projects the key can reach',
    tags: ['projects'],
    scopes: ['project:read'],
    query: { type: 'object', properties: PAGE_QUERY_PROPERTIES },
    responses: { 200: { description: 'A page of projects', schema: paginatedSchema(projectBasicSchema) } },
    handler: async (ctx) => {
      const key = ctx.state.auth;
      if (key.scopedTeams?.length) throw permissionDenied('API keys with scoped projects are only supported on project-based endpoints.');
      const page = pageOf(ctx.state.query);
      const orgFilter = key.scopedOrganizations?.length ? `and p.organization_id = any(?::uuid[])` : '';
      const params: unknown[] = [key.userId];
      if (orgFilter) params.push(pgArray(key.scopedOrganizations!));
      const conn = ctx.state.em.getConnection();
      const from = `from project p join organization_membership m on m.organization_id = p.organization_id and m.user_id = ? where true ${orgFilter}`;
      const [{ count }] = await conn.execute<any[]>(`select count(*)::int as count ${from}`, params);
      const rows = await conn.execute<ProjectRow[]>(`select p.* ${from} order by p.id limit ? offset ?`, [...params, page.limit, page.offset]);
      ctx.body = paginated(ctx, page, count, rows.map(projectBasic));
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
        schema: { ...projectBasicSchema, required: [...projectBasicSchema.required, 'project_id', 'created_at'] },
      },
      404: { description: 'Project not found.' },
    },
    handler: (ctx) => {
      ctx.body = projectDetail(ctx.state.project);
    },
  }),
];
