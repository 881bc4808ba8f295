// Personal-API-key authentication, scope checks and project access, in PostHog's order:
// credentials (401) → scope (403) → project exists (404) → key's project/org scoping (403) → membership (403).
import type { EntityManager } from '@mikro-orm/postgresql';
import type { Context } from 'koa';
import { createHash, timingSafeEqual } from 'node:crypto';
import type { AuthCache } from './auth-cache.ts';
import { hashPersonalApiKey } from '../../shared/auth/tokens.ts';
import { scopesGrant } from '../../shared/auth/scopes.ts';
import { authenticationFailed, notAuthenticated, notFound, permissionDenied } from './errors.ts';
import {
  firstProjectIdOf,
  keyWithProject,
  projectWithMembershipOf,
  touchPersonalApiKey,
} from '../../shared/accounts.ts';

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
  event_retention_days: number | null;
  recording_retention_days: number | null;
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

type ProjectWithMembership = ProjectRow & { is_member: boolean };

/** `:project_id` as a project id, `'current'` for `@current`, or null when it names no project. */
const parseProjectParam = (param: string): number | 'current' | null =>
  param === '@current' ? 'current' : /^\d{1,9}$/.test(param) ? Number(param) : null;

/**
 * Finds the key's user and, for a project route (`projectIdParam`), the project in the same round
 * trip: every project request needs both. `project` is left undefined when it was not looked up
 * (not a project route, a malformed id, or `@current` for a user without a current project).
 * With `cache`, a repeat of a request already seen skips PostgreSQL (see auth-cache.ts).
 */
export async function authenticate(
  ctx: Context,
  em: EntityManager,
  body: unknown,
  projectIdParam?: string,
  cache?: AuthCache | null,
): Promise<{ key: AuthenticatedKey; project?: ProjectWithMembership | null }> {
  const found = findKey(ctx, body);
  if (!found) throw notAuthenticated();
  const wanted = projectIdParam === undefined ? null : parseProjectParam(projectIdParam);
  const secureValue = hashPersonalApiKey(found.value);
  const cacheKey = `${secureValue} ${wanted}`;
  let row: Record<string, any> | undefined = cache?.read(cacheKey);
  if (!row) {
    const generation = cache?.snapshot() ?? 0;
    row =
      (await keyWithProject(em, secureValue, wanted !== null, typeof wanted === 'number' ? wanted : null)) ?? undefined;
    if (!row) throw authenticationFailed(`Personal API key found in request ${found.source} is invalid.`);
    cache?.store(cacheKey, row, generation);
  }
  // last_used_at moves at most once an hour, so reads do not turn into writes. The row may be the
  // cached one: it records the update too, so the next cached request does not repeat it.
  const lastUsed = row.key_last_used_at ? new Date(row.key_last_used_at).getTime() : 0;
  if (Date.now() - lastUsed > 3600_000) {
    row.key_last_used_at = new Date();
    touchPersonalApiKey(em, row.key_id).catch(() => undefined);
  }
  const { key, project } = splitKeyRow(row);
  if (wanted === null || (wanted === 'current' && key.currentProjectId === null)) return { key };
  return { key, project };
}

// What authenticate() answers, made once per row: a cached row serves many requests, and taking it apart
// each time was about 5% of the API's CPU on a GET by id (bench/persons.ts). Frozen: requests share them.
const splitRows = new WeakMap<object, { key: AuthenticatedKey; project: ProjectWithMembership | null }>();
function splitKeyRow(row: Record<string, any>): { key: AuthenticatedKey; project: ProjectWithMembership | null } {
  let split = splitRows.get(row);
  if (!split) {
    const key: AuthenticatedKey = Object.freeze({
      keyId: row.key_id,
      userId: row.key_user_id,
      scopes: row.key_scopes,
      scopedTeams: row.key_scoped_teams,
      scopedOrganizations: row.key_scoped_organizations,
      currentProjectId: row.key_current_project_id,
    });
    const project =
      row.id === null
        ? null
        : (Object.freeze(
            Object.fromEntries(Object.entries(row).filter(([column]) => !column.startsWith('key_'))),
          ) as unknown as ProjectWithMembership);
    split = { key, project };
    splitRows.set(row, split);
  }
  return split;
}

export function requireScopes(key: AuthenticatedKey, required: readonly string[]): void {
  for (const scope of required) {
    if (!scopesGrant(key.scopes, scope)) throw permissionDenied(`API key missing required scope '${scope}'`);
  }
}

/**
 * Resolves `:project_id` (an integer or `@current`) to a project the key may act on. `prefetched` is
 * the row authenticate() found for it (null: none), undefined when it was not looked up.
 */
export async function resolveProject(
  em: EntityManager,
  key: AuthenticatedKey,
  projectIdParam: string,
  prefetched?: ProjectWithMembership | null,
): Promise<ProjectRow> {
  let project = prefetched;
  if (project === undefined) {
    const wanted = parseProjectParam(projectIdParam);
    const projectId =
      wanted === 'current' ? (key.currentProjectId ?? (await firstProjectIdOf(em, key.userId))) : wanted;
    if (projectId === null) throw notFound('Project not found.');
    project = (await projectWithMembershipOf(em, key.userId, projectId)) as ProjectWithMembership | null;
  }
  if (!project) throw notFound('Project not found.');
  if (key.scopedTeams?.length && !key.scopedTeams.includes(project.id))
    throw permissionDenied(`API key does not have access to the requested project: ID ${project.id}.`);
  if (key.scopedOrganizations?.length && !key.scopedOrganizations.includes(project.organization_id))
    throw permissionDenied(
      `API key does not have access to the requested organization: ID ${project.organization_id}.`,
    );
  if (!project.is_member) throw permissionDenied("You don't have access to the project.");
  const { is_member: _, ...row } = project;
  return row;
}

/** Compares a secret sent by a client with the configured one in constant time (lengths included). */
export function sameSecret(given: string, expected: string): boolean {
  const digest = (value: string) => createHash('sha256').update(value, 'utf8').digest();
  return timingSafeEqual(digest(given), digest(expected));
}
