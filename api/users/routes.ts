// Introspection: what a client's key is and whose it is, in PostHog's shapes.
import { isoTimestamp } from '../../shared/time.ts';
import { projectBasic } from '../projects/serializers.ts';
import { defineRoute } from '../http/routes.ts';
import type { ProjectRow } from '../http/auth.ts';

export const introspectionRoutes = [
  defineRoute({
    method: 'GET',
    path: '/api/personal_api_keys/@current',
    summary: 'The calling key: label, masked value, scopes and scoping (never the secret)',
    tags: ['keys'],
    scopes: [],
    responses: {
      200: {
        description: 'The key',
        schema: { type: 'object', required: ['id', 'label', 'mask_value', 'scopes', 'scoped_teams', 'scoped_organizations', 'created_at', 'last_used_at', 'value'] },
      },
    },
    handler: async (ctx) => {
      const [key] = await ctx.state.em.getConnection().execute<any[]>(`select * from personal_api_key where id = ?`, [ctx.state.auth.keyId]);
      ctx.body = {
        id: key.id,
        label: key.label,
        value: null,
        mask_value: key.mask_value,
        scopes: key.scopes?.length ? key.scopes : ['*'],
        scoped_teams: key.scoped_teams ?? [],
        scoped_organizations: key.scoped_organizations ?? [],
        created_at: isoTimestamp(key.created_at),
        last_used_at: isoTimestamp(key.last_used_at),
        last_rolled_at: isoTimestamp(key.last_rolled_at),
      };
    },
  }),
  defineRoute({
    method: 'GET',
    path: '/api/users/@me',
    summary: "The key's user with its current organization and project",
    tags: ['keys'],
    scopes: [],
    responses: { 200: { description: 'The user', schema: { type: 'object', required: ['id', 'uuid', 'distinct_id', 'email', 'organization', 'organizations', 'team'] } } },
    handler: async (ctx) => {
      const conn = ctx.state.em.getConnection();
      const key = ctx.state.auth;
      const [user] = await conn.execute<any[]>(`select * from app_user where id = ?`, [key.userId]);
      const orgs = await conn.execute<any[]>(
        `select o.*, m.level from organization o join organization_membership m on m.organization_id = o.id and m.user_id = ?
          ${key.scopedOrganizations?.length ? 'where o.id in (?)' : ''} order by o.created_at`,
        key.scopedOrganizations?.length ? [key.userId, key.scopedOrganizations] : [key.userId],
      );
      const current = orgs.find((o) => o.id === user.current_organization_id) ?? orgs[0] ?? null;
      const projects = current
        ? await conn.execute<ProjectRow[]>(`select * from project where organization_id = ? ${key.scopedTeams?.length ? 'and id in (?)' : ''} order by id`, key.scopedTeams?.length ? [current.id, key.scopedTeams] : [current.id])
        : [];
      const team = projects.find((p) => p.id === user.current_project_id) ?? projects[0] ?? null;
      const orgShape = (o: any) => ({ id: o.id, name: o.name, slug: o.name.toLowerCase().replace(/[^a-z0-9]+/g, '-'), membership_level: o.level, created_at: isoTimestamp(o.created_at) });
      ctx.body = {
        id: user.id,
        uuid: user.uuid,
        distinct_id: user.distinct_id,
        first_name: user.first_name,
        last_name: user.last_name,
        email: user.email,
        is_email_verified: user.is_email_verified,
        hedgehog_config: user.hedgehog_config,
        role_at_organization: user.role_at_organization,
        organization: current ? { ...orgShape(current), teams: projects.map(projectBasic), projects: projects.map((p) => ({ id: p.id, name: p.name })) } : null,
        organizations: orgs.map(orgShape),
        team: team ? projectBasic(team) : null,
      };
    },
  }),
];
