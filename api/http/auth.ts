// Personal-API-key authentication, scope checks and project access, in PostHog's order:
// credentials (401) → scope (403) → project exists (404) → key's project/org scoping (403) → membership (403).
import type { EntityManager } from '@mikro-orm/postgresql';
import type { Context } from 'koa';
import { hashPersonalApiKey } from '../../shared/auth/tokens.ts';
import { scopesGrant } from '../../shared/auth/scopes.ts';
import { authenticationFailed, notAuthenticated, notFound, permissionDenied } from './errors.ts';

export interface AuthenticatedKey {
  keyId: string;
  userId: number;
  scopes: string[] | null;
  scopedTeams: number[] | null;
  scopedOrganizations: string[] | null;
  currentProjectId: number | null;
}

export interface ProjectRow {
  id: number;
  uuid: string;
  organization_id: string;
  name: string;
  api_token: string;
  timezone: string;
  completed_snippet_onboarding: boolean;
  ingested_event: boolean;
  is_demo: boolean;
  created_at: Date;
  updated_at: Date;
}

const BEARER = /^Bearer\s+(\S.+)$/i;

/** Where the key was found, first hit wins: Authorization header, `personal_api_key` in the body, then in the query. */
function findKey(ctx: Context, body: unknown): { value: string; source: string } | null {
  const header = ctx.get('authorization').trim();
  const match = BEARER.exec(header);
  if (match) return { value: match[1].trim(), source: 'Authorization header' };
  if (body && typeof body === 'object' && typeof (body as any).personal_api_key === 'string')
    return { value: (body as any).personal_api_key.trim(), source: 'body' };
  const fromQuery = ctx.query.personal_api_key;
  if (typeof fromQuery === 'string' && fromQuery) return { value: fromQuery.trim(), source: 'query string' };
  return null;
}

/** The project a project route names, looked up in the key's query; checked only after the scopes, in PostHog's order. */
export interface ProjectLookup {
  param: string;
  row: (ProjectRow & { is_member: boolean }) | null;
}

const KEY_COLUMNS = ['key_id', 'user_id', 'scopes', 'scoped_teams', 'scoped_organizations', 'last_used_at', 'current_project_id'];

/**
 * Finds the key's user and, for a project route (`projectIdParam`), the project in the same round
 * trip: every project request needs both.
 */
export async function authenticate(ctx: Context, em: EntityManager, body: unknown, projectIdParam?: string): Promise<{ key: AuthenticatedKey; project?: ProjectLookup }> {
  const found = findKey(ctx, body);
  if (!found) throw notAuthenticated();
  const lookUpProject = projectIdParam !== undefined && (projectIdParam === '@current' || /^\d{1,9}$/.test(projectIdParam));
  const rows = await em.getConnection().execute<any[]>(
    `select k.id as key_id, k.user_id, k.scopes, k.scoped_teams, k.scoped_organizations, k.last_used_at, u.current_project_id, p.*
       from personal_api_key k join app_user u on u.id = k.user_id
       left join lateral (select p.*, exists(select 1 from organization_membership m where m.organization_id = p.organization_id and m.user_id = u.id) as is_member
                            from project p where ? and p.id = coalesce(?::int, u.current_project_id)) p on true
      where k.secure_value = ? and u.is_active`,
    [lookUpProject, lookUpProject && projectIdParam !== '@current' ? Number(projectIdParam) : null, hashPersonalApiKey(found.value)],
  );
  const row = rows[0];
  if (!row) throw authenticationFailed(`Personal API key found in request ${found.source} is invalid.`);
  // last_used_at moves at most once an hour, so reads do not turn into writes.
  const lastUsed = row.last_used_at ? new Date(row.last_used_at).getTime() : 0;
  if (Date.now() - lastUsed > 3600_000) {
    em.getConnection()
      .execute(`update personal_api_key set last_used_at = now() where id = ?`, [row.key_id])
      .catch(() => undefined);
  }
  const key: AuthenticatedKey = {
    keyId: row.key_id,
    userId: row.user_id,
    scopes: row.scopes,
    scopedTeams: row.scoped_teams,
    scopedOrganizations: row.scoped_organizations,
    currentProjectId: row.current_project_id,
  };
  if (!lookUpProject) return { key };
  for (const column of KEY_COLUMNS) delete row[column];
  // No current project: resolveProject falls back to the first one the user can reach.
  if (projectIdParam === '@current' && key.currentProjectId === null) return { key };
  return { key, project: { param: projectIdParam!, row: row.id === null ? null : row } };
}

export function requireScopes(key: AuthenticatedKey, required: readonly string[]): void {
  for (const scope of required) {
    if (!scopesGrant(key.scopes, scope)) throw permissionDenied(`API key missing required scope '${scope}'`);
  }
}

/** Resolves `:project_id` (an integer or `@current`) to a project the key may act on; `lookup` is the row authenticate() found for it. */
export async function resolveProject(em: EntityManager, key: AuthenticatedKey, projectIdParam: string, lookup?: ProjectLookup): Promise<ProjectRow> {
  let project = lookup?.param === projectIdParam ? lookup.row : undefined;
  if (project === undefined) {
    let projectId: number | null;
    if (projectIdParam === '@current') {
      projectId = key.currentProjectId ?? (await firstAccessibleProjectId(em, key));
      if (projectId === null) throw notFound('Project not found.');
    } else if (/^\d{1,9}$/.test(projectIdParam)) {
      projectId = Number(projectIdParam);
    } else {
      throw notFound('Project not found.');
    }
    const rows = await em.getConnection().execute<any[]>(
      `select p.*, exists(select 1 from organization_membership m where m.organization_id = p.organization_id and m.user_id = ?) as is_member
         from project p where p.id = ?`,
      [key.userId, projectId],
    );
    project = rows[0] ?? null;
  }
  if (!project) throw notFound('Project not found.');
  if (key.scopedTeams?.length && !key.scopedTeams.includes(project.id))
    throw permissionDenied(`API key does not have access to the requested project: ID ${project.id}.`);
  if (key.scopedOrganizations?.length && !key.scopedOrganizations.includes(project.organization_id))
    throw permissionDenied(`API key does not have access to the requested organization: ID ${project.organization_id}.`);
  if (!project.is_member) throw permissionDenied("You don't have access to the project.");
  const { is_member: _, ...row } = project;
  return row;
}

async function firstAccessibleProjectId(em: EntityManager, key: AuthenticatedKey): Promise<number | null> {
  const rows = await em.getConnection().execute<any[]>(
    `select p.id from project p join organization_membership m on m.organization_id = p.organization_id
      where m.user_id = ? order by p.id limit 1`,
    [key.userId],
  );
  return rows[0]?.id ?? null;
}
