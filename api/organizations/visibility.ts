// What a key can see outside project routes: the organizations its user belongs to and their
// projects, narrowed by the key's organization and project scoping. One rule for /api/projects/,
// /api/organizations/… and /api/users/@me, so a scoped key sees the same world everywhere.
import type { EntityManager } from '@mikro-orm/postgresql';
import {
  currentOrganizationIdOf,
  organizationsOfUser,
  projectsOfUser,
  type ProjectRow,
} from '../../shared/accounts/index.ts';
import { isUuid } from '../../shared/platform/db/sql.ts';
import type { AuthenticatedKey } from '../http/auth.ts';
import { notFound, permissionDenied } from '../http/errors.ts';

/** An organization with the user's membership `level` (1 member, 8 admin, 15 owner) and its `member_count`. */
export type OrganizationRow = Awaited<ReturnType<typeof organizationsOfUser>>[number];

const scoping = (key: AuthenticatedKey) => ({
  organizations: key.scopedOrganizations?.length ? key.scopedOrganizations : null,
  teams: key.scopedTeams?.length ? key.scopedTeams : null,
});

/** The key's organizations, oldest first. A project-scoped key sees the organizations of its projects. */
export async function visibleOrganizations(em: EntityManager, key: AuthenticatedKey): Promise<OrganizationRow[]> {
  const { organizations, teams } = scoping(key);
  return organizationsOfUser(em, key.userId, organizations, teams);
}

/** The key's projects (of one organization when given), by id. */
export async function visibleProjects(
  em: EntityManager,
  key: AuthenticatedKey,
  organizationId: string | null = null,
): Promise<ProjectRow[]> {
  const { organizations, teams } = scoping(key);
  return projectsOfUser(em, key.userId, organizations, teams, organizationId);
}

/**
 * Resolves `:organization_id` (a uuid or `@current`). Unknown organizations and ones the user is
 * not a member of are 404, as in PostHog; one outside the key's scoping is 403 naming it.
 */
export async function resolveOrganization(
  em: EntityManager,
  key: AuthenticatedKey,
  param: string,
): Promise<OrganizationRow> {
  // The user's organizations, and those the key's scoping leaves visible.
  const [memberOf, visible] = await Promise.all([
    visibleOrganizations(em, { ...key, scopedOrganizations: null, scopedTeams: null }),
    visibleOrganizations(em, key),
  ]);
  let organization: OrganizationRow | undefined;
  if (param === '@current') {
    const current = await currentOrganizationIdOf(em, key.userId);
    organization = visible.find((o) => o.id === current) ?? visible[0];
  } else if (isUuid(param)) {
    organization = memberOf.find((o) => o.id === param.toLowerCase());
  }
  if (!organization) throw notFound('Organization not found.');
  if (!visible.some((o) => o.id === organization.id))
    throw permissionDenied(`API key does not have access to the requested organization: ID ${organization.id}.`);
  return organization;
}
