// Introspection: what a client's key is and whose it is, in PostHog's shapes.
import { findPersonalApiKey, findUserWithCurrent } from '../../shared/accounts/index.ts';
import { isoTimestamp } from '../../shared/platform/time.ts';
import { projectBasic, projectBasicSchema } from '../projects/serializers.ts';
import { authenticationFailed } from '../http/errors.ts';
import { defineRoute } from '../http/routes.ts';
import { dateTime, nullableDateTime, nullableString, record, stringArray } from '../http/schemas.ts';
import {
  organizationBasic,
  organizationBasicSchema,
  organizationDetail,
  organizationDetailSchema,
} from '../organizations/serializers.ts';
import { visibleOrganizations, visibleProjects } from '../organizations/visibility.ts';
import { userBasic, userBasicSchema } from './serializers.ts';

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
        schema: record({
          id: { type: 'string' },
          label: { type: 'string' },
          value: { type: 'null', description: 'Never the secret' },
          mask_value: nullableString,
          scopes: stringArray,
          scoped_teams: { type: 'array', items: { type: 'integer' } },
          scoped_organizations: stringArray,
          created_at: dateTime,
          last_used_at: nullableDateTime,
          last_rolled_at: nullableDateTime,
        }),
      },
    },
    handler: async (ctx) => {
      const key = await findPersonalApiKey(ctx.state.em, ctx.state.auth.keyId);
      // Revoked since it authenticated this request.
      if (!key) throw authenticationFailed('Personal API key is invalid.');
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
    responses: {
      200: {
        description: 'The user',
        schema: record({
          ...userBasicSchema.properties,
          organization: { ...organizationDetailSchema, type: ['object', 'null'] },
          organizations: { type: 'array', items: organizationBasicSchema },
          team: { ...projectBasicSchema, type: ['object', 'null'] },
        }),
      },
    },
    handler: async (ctx) => {
      const em = ctx.state.em;
      const key = ctx.state.auth;
      const [user, organizations, projects] = await Promise.all([
        findUserWithCurrent(em, key.userId),
        visibleOrganizations(em, key),
        visibleProjects(em, key),
      ]);
      // Deactivated or deleted since the key authenticated this request.
      if (!user) throw authenticationFailed('Personal API key is invalid.');
      const organization = organizations.find((o) => o.id === user.current_organization_id) ?? organizations[0] ?? null;
      const teams = organization ? projects.filter((p) => p.organization_id === organization.id) : [];
      const team = teams.find((p) => p.id === user.current_project_id) ?? teams[0] ?? null;
      ctx.body = {
        ...userBasic(user, 'user'),
        organization: organization ? organizationDetail(organization, teams) : null,
        organizations: organizations.map(organizationBasic),
        team: team ? projectBasic(team) : null,
      };
    },
  }),
  // Key management needs the user's session in PostHog; here it is the `npm run manage` command.
  ...(
    [
      ['GET', '/api/personal_api_keys'],
      ['POST', '/api/personal_api_keys'],
      ['GET', '/api/personal_api_keys/:key_id'],
      ['PATCH', '/api/personal_api_keys/:key_id'],
      ['DELETE', '/api/personal_api_keys/:key_id'],
      ['POST', '/api/personal_api_keys/:key_id/roll'],
      // The literal path owns `@current` for every method (api/http/routes.ts): refused as any key is.
      ['PATCH', '/api/personal_api_keys/@current'],
      ['DELETE', '/api/personal_api_keys/@current'],
    ] as const
  ).map(([method, path]) =>
    defineRoute({
      method,
      path,
      summary: 'Managing keys is not possible with a personal API key (use `npm run manage -- key …`)',
      tags: ['keys'],
      scopes: [],
      personalApiKeyAccess: false,
      responses: { 403: { description: 'This action does not support Personal API Key access' } },
      handler: () => undefined, // not reached: refused after authentication
    }),
  ),
];
