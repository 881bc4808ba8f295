// Personal-API-key authentication, scope checks and project access, in PostHog's order:
// credentials (401) → scope (403) → project exists (404) → key's project/org scoping (403) → membership (403).
import { isId } from '../../shared/platform/ids.ts';
import type { EntityManager } from '@mikro-orm/postgresql';
import type { Context } from 'koa';
import { createHash, timingSafeEqual } from 'node:crypto';
import type { AuthCache } from './auth-cache.ts';
import { hashPersonalApiKey } from '../../shared/platform/auth/tokens.ts';
import { scopesGrant } from '../../shared/platform/auth/scopes.ts';
import { authenticationFailed, notAuthenticated, notFound, permissionDenied } from './errors.ts';
import {
  firstProjectIdOf,
  keyWithProject,
  projectWithMembershipOf,
  touchPersonalApiKey,
  type KeyWithProject,
  type ProjectRow,
} from '../../shared/accounts/index.ts';

export type { ProjectRow };

export interface AuthenticatedKey {
  keyId: string;
  userId: number;
  scopes: string[] | null;
  scopedTeams: number[] | null;
  scopedOrganizations: string[] | null;
  currentProjectId: number | null;
}

const BEARER = /^Bearer\s+(\S.+)$/i;

/** Where the key was found, first hit wins: Authorization header, `personal_api_key` in the body, then in the query. */
function findKey(ctx: Context, body: unknown): { value: string; source: string } | null {
  const header = ctx.get('authorization').trim();
  const match = BEARER.exec(header);
  if (match) return { value: match[1].trim(), source: 'Authorization header' };
  const inBody = body && typeof body === 'object' && 'personal_api_key' in body ? body.personal_api_key : undefined;
  if (typeof inBody === 'string') return { value: inBody.trim(), source: 'body' };
  const fromQuery = ctx.query.personal_api_key;
  if (typeof fromQuery === 'string' && fromQuery) return { value: fromQuery.trim(), source: 'query string' };
  return null;
}

type ProjectWithMembership = ProjectRow & { is_member: boolean };

/** `:project_id` as a project id, `'current'` for `@current`, or null when it names no project. */
const parseProjectParam = (param: string): number | 'current' | null =>
  param === '@current' ? 'current' : isId(param) ? Number(param) : null;

/**
 * Finds the key's user and, for a project route (`projectIdParam`), the project in the same round
 * trip: every project request needs both. `project` is left undefined when it was not looked up
 * (not a project route, a malformed id, or `@current` for a user without a current project).
 * With `cache`, a repeat of a request already seen skips PostgreSQL (see auth-cache.ts).
 */
export async function authenticate(
  ctx: Context,
  em: () => EntityManager,
  body: unknown,
  projectIdParam?: string,
  cache?: AuthCache<KeyWithProject> | null,
): Promise<{ key: AuthenticatedKey; project?: ProjectWithMembership | null }> {
  const found = findKey(ctx, body);
  if (!found) throw notAuthenticated();
  const wanted = projectIdParam === undefined ? null : parseProjectParam(projectIdParam);
  // Cached by the key as sent, so a request seen before does not hash it again (a key and its hash name
  // the same row); the entry goes with every invalidation and expiry as any other.
  const cacheKey = `${found.value} ${wanted}`;
  let row = cache?.read(cacheKey);
  if (!row) {
    const generation = cache?.snapshot() ?? 0;
    const secureValue = hashPersonalApiKey(found.value);
    row =
      (await keyWithProject(em(), secureValue, wanted !== null, typeof wanted === 'number' ? wanted : null)) ??
      undefined;
    if (!row) throw authenticationFailed(`Personal API key found in request ${found.source} is invalid.`);
    cache?.store(cacheKey, row, generation);
  }
  // last_used_at moves at most once an hour, so reads do not turn into writes. The row may be the
  // cached one: it records the update too, so the next cached request does not repeat it.
  const lastUsed = row.key_last_used_at ? new Date(row.key_last_used_at).getTime() : 0;
  if (Date.now() - lastUsed > 3600_000) {
    row.key_last_used_at = new Date();
    touchPersonalApiKey(em(), row.key_id).catch(() => undefined);
  }
  const { key, project } = splitKeyRow(row);
  if (wanted === null || (wanted === 'current' && key.currentProjectId === null)) return { key };
  return { key, project };
}

// What authenticate() answers, made once per row: a cached row serves many requests, and taking it apart
// each time was about 5% of the API's CPU on a GET by id (bench/persons.ts). Frozen: requests share them.
const splitRows = new WeakMap<object, { key: AuthenticatedKey; project: ProjectWithMembership | null }>();
function splitKeyRow(row: KeyWithProject): { key: AuthenticatedKey; project: ProjectWithMembership | null } {
  let split = splitRows.get(row);
  if (!split) {
    const {
      key_id,
      key_user_id,
      key_scopes,
      key_scoped_teams,
      key_scoped_organizations,
      key_current_project_id,
      key_last_used_at: _,
      ...columns
    } = row;
    const key: AuthenticatedKey = Object.freeze({
      keyId: key_id,
      userId: key_user_id,
      scopes: key_scopes,
      scopedTeams: key_scoped_teams,
      scopedOrganizations: key_scoped_organizations,
      currentProjectId: key_current_project_id,
    });
    // The project comes from a left join, so its columns are typed nullable; a found project (id not
    // null) has them as its table holds them, NOT NULL ones included.
    const project =
      columns.id === null ? null : (Object.freeze(columns) as Readonly<typeof columns> as ProjectWithMembership);
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
  entityManager: EntityManager | (() => EntityManager),
  key: AuthenticatedKey,
  projectIdParam: string,
  prefetched?: ProjectWithMembership | null,
): Promise<ProjectRow> {
  let project = prefetched;
  if (project === undefined) {
    const em = typeof entityManager === 'function' ? entityManager() : entityManager;
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
