// Creating organizations, projects, users and personal API keys: one implementation for the
// bootstrap command, the management command and the tests.
import type { EntityManager } from '@mikro-orm/postgresql';
import { randomUUID } from 'node:crypto';
import {
  generateKeyId,
  generatePersonalApiKey,
  generateProjectApiToken,
  hashPersonalApiKey,
  maskPersonalApiKey,
} from './auth/tokens.ts';
import { isValidScope } from './auth/scopes.ts';
import { isUuid, pgArray, rows, run } from './db/sql.ts';
import { Organization, OrganizationMembership, PersonalApiKey, Project, User } from './entities/index.ts';

export async function createOrganization(em: EntityManager, name: string) {
  if (!name.trim()) throw new AccountError('name: This field may not be blank.');
  if (name.length > 64) throw new AccountError('name: Ensure this field has no more than 64 characters.');
  const organization = em.create(Organization, { id: randomUUID(), name });
  await em.persist(organization).flush();
  return organization;
}

async function requireOrganization(em: EntityManager, organizationId: string) {
  const found =
    isUuid(organizationId) &&
    (await rows<any>(em, `select 1 from organization where id = ?`, [organizationId])).length > 0;
  if (!found) throw new AccountError(`No organization with id ${organizationId}`);
}

function isTimezone(name: string): boolean {
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: name });
    return true;
  } catch {
    return false;
  }
}

export async function createProject(em: EntityManager, organizationId: string, name: string, timezone = 'UTC') {
  if (!name.trim()) throw new AccountError('name: This field may not be blank.');
  if (name.length > 200) throw new AccountError('name: Ensure this field has no more than 200 characters.');
  if (!isTimezone(timezone)) throw new AccountError(`"${timezone}" is not a valid choice.`);
  await requireOrganization(em, organizationId);
  const project = em.create(Project, {
    uuid: randomUUID(),
    organizationId,
    name,
    apiToken: generateProjectApiToken(),
    timezone,
  });
  await em.persist(project).flush();
  return project;
}

export async function createUser(
  em: EntityManager,
  input: {
    email: string;
    firstName?: string;
    lastName?: string;
    organizationId: string;
    level?: number;
    currentProjectId?: number;
  },
) {
  if (!/^[^\s@]+@[^\s@]+\.[^\s@]+$/.test(input.email) || input.email.length > 254)
    throw new AccountError(`Enter a valid email address: ${input.email}`);
  await requireOrganization(em, input.organizationId);
  const taken = await rows<any>(em, `select 1 from app_user where lower(email) = lower(?)`, [input.email]);
  if (taken.length > 0) throw new AccountError(`There is already a user with the email ${input.email}`);
  const user = em.create(User, {
    uuid: randomUUID(),
    distinctId: randomUUID(),
    email: input.email,
    firstName: input.firstName ?? '',
    lastName: input.lastName ?? '',
    isEmailVerified: false,
    hedgehogConfig: null,
    roleAtOrganization: null,
    currentOrganizationId: input.organizationId,
    currentProjectId: input.currentProjectId ?? null,
  });
  await em.persist(user).flush();
  em.create(OrganizationMembership, { organizationId: input.organizationId, userId: user.id, level: input.level ?? 1 });
  await em.flush();
  return user;
}

/** Bad input to an account operation: the message is for the person who gave it. */
export class AccountError extends Error {}

/** Adds a user to an organization, or changes their level there. */
export async function setMembership(em: EntityManager, organizationId: string, userId: number, level: number) {
  await requireOrganization(em, organizationId);
  await rows(
    em,
    `insert into organization_membership (organization_id, user_id, level, joined_at) values (?, ?, ?, now())
     on conflict (organization_id, user_id) do update set level = excluded.level`,
    [organizationId, userId, level],
  );
}

/** A deactivated user's keys answer 401 at once; reactivating brings them back. */
export async function setUserActive(em: EntityManager, userId: number, active: boolean) {
  await rows(em, `update app_user set is_active = ? where id = ?`, [active, userId]);
}

export const MAX_KEYS_PER_USER = 10;
const MEMBERSHIP_LEVELS: Record<string, number> = { member: 1, admin: 8, owner: 15 };

export function membershipLevel(name: string): number {
  const level = MEMBERSHIP_LEVELS[name];
  if (!level)
    throw new AccountError(`Invalid membership level: ${name} (one of ${Object.keys(MEMBERSHIP_LEVELS).join(', ')})`);
  return level;
}

interface KeyInput {
  userId: number;
  label: string;
  scopes: string[] | null;
  scopedTeams?: number[] | null;
  scopedOrganizations?: string[] | null;
}

/** PostHog's rules for a new key: a label, valid scopes, scoping only to what the user is a member of, at most `limit` keys. */
async function checkKeyInput(em: EntityManager, input: KeyInput, limit: number | null, checkScoping: boolean) {
  if (!input.label.trim()) throw new AccountError('label: This field may not be blank.');
  if (input.label.length > 40) throw new AccountError('label: Ensure this field has no more than 40 characters.');
  for (const scope of input.scopes ?? []) if (!isValidScope(scope)) throw new AccountError(`Invalid scope: ${scope}`);
  if (checkScoping && (input.scopedTeams?.length || input.scopedOrganizations?.length)) {
    const [{ missing }] = await rows<any>(
      em,
      `select (select count(*)::int from unnest(?::int[]) t(id)
                where not exists (select 1 from project p join organization_membership m on m.organization_id = p.organization_id and m.user_id = ? where p.id = t.id))
            + (select count(*)::int from unnest(?::text[]) o(id)
                where not exists (select 1 from organization_membership m where m.organization_id::text = o.id and m.user_id = ?)) as missing`,
      [pgArray(input.scopedTeams ?? []), input.userId, pgArray(input.scopedOrganizations ?? []), input.userId],
    );
    if (missing > 0)
      throw new AccountError('You must be a member of all organizations/teams that you are scoping the key to.');
  }
  if (limit !== null) {
    const [{ count }] = await rows<any>(em, `select count(*)::int as count from personal_api_key where user_id = ?`, [
      input.userId,
    ]);
    if (count >= limit)
      throw new AccountError(
        `You can only have ${limit} personal API keys. Remove an existing key before creating a new one.`,
      );
  }
}

/** Creates a key and returns its plain value, the only time it exists outside the caller. */
export async function createPersonalApiKey(
  em: EntityManager,
  input: KeyInput,
  options: { limit?: number | null; checkScoping?: boolean } = {},
) {
  await checkKeyInput(
    em,
    input,
    options.limit === undefined ? MAX_KEYS_PER_USER : options.limit,
    options.checkScoping ?? true,
  );
  const value = generatePersonalApiKey();
  const key = em.create(PersonalApiKey, {
    id: generateKeyId(),
    userId: input.userId,
    label: input.label,
    maskValue: maskPersonalApiKey(value),
    secureValue: hashPersonalApiKey(value),
    scopes: input.scopes,
    scopedTeams: input.scopedTeams ?? null,
    scopedOrganizations: input.scopedOrganizations ?? null,
    lastUsedAt: null,
    lastRolledAt: null,
  });
  await em.persist(key).flush();
  return { key, value };
}

/** A new secret for an existing key (same id, label and scopes); the old value stops working at once. */
export async function rollPersonalApiKey(em: EntityManager, keyId: string): Promise<string> {
  const value = generatePersonalApiKey();
  const changed = await rows<any>(
    em,
    `update personal_api_key set secure_value = ?, mask_value = ?, last_rolled_at = now() where id = ? returning id`,
    [hashPersonalApiKey(value), maskPersonalApiKey(value), keyId],
  );
  if (changed.length === 0) throw new AccountError(`No personal API key with id ${keyId}`);
  return value;
}

export async function revokePersonalApiKey(em: EntityManager, keyId: string): Promise<void> {
  const changed = await rows<any>(em, `delete from personal_api_key where id = ? returning id`, [keyId]);
  if (changed.length === 0) throw new AccountError(`No personal API key with id ${keyId}`);
}

/** A new phc_ token for a project (PostHog's reset_token); SDKs holding the old one get 401. */
export async function rotateProjectToken(em: EntityManager, projectId: number): Promise<string> {
  const token = generateProjectApiToken();
  const changed = await rows<any>(
    em,
    `update project set api_token = ?, updated_at = now() where id = ? returning id`,
    [token, projectId],
  );
  if (changed.length === 0) throw new AccountError(`No project with id ${projectId}`);
  return token;
}

/** A new install's first organization, project, user and all-scopes key. */
export async function bootstrapInstall(
  em: EntityManager,
  input: { email: string; organizationName?: string; projectName?: string },
) {
  const organization = await createOrganization(em, input.organizationName ?? 'Default organization');
  const project = await createProject(em, organization.id, input.projectName ?? 'Default project');
  const user = await createUser(em, {
    email: input.email,
    organizationId: organization.id,
    level: 15,
    currentProjectId: project.id,
  });
  const { key, value } = await createPersonalApiKey(em, { userId: user.id, label: 'bootstrap', scopes: ['*'] });
  return { organization, project, user, key, apiKey: value };
}

/** Columns of app_user as `<alias>_<column>` so one row can carry several users. */
export const userColumns = (alias: string, prefix: string) =>
  [
    'id',
    'uuid',
    'distinct_id',
    'first_name',
    'last_name',
    'email',
    'is_email_verified',
    'hedgehog_config',
    'role_at_organization',
  ]
    .map((c) => `${alias}.${c} as ${prefix}_${c}`)
    .join(', ');

export async function isOrganizationMember(em: EntityManager, organizationId: string, userId: number) {
  const found = await rows(em, `select 1 from organization_membership where organization_id = ? and user_id = ?`, [
    organizationId,
    userId,
  ]);
  return found.length > 0;
}

export async function findPersonalApiKey(em: EntityManager, keyId: string) {
  const [key] = await rows<Record<string, any>>(em, `select * from personal_api_key where id = ?`, [keyId]);
  return key ?? null;
}

/** The user as `user_<column>` (see userColumns) with their current organization and project. */
export async function findUserWithCurrent(em: EntityManager, userId: number) {
  const [user] = await rows<Record<string, any>>(
    em,
    `select ${userColumns('u', 'user')}, u.current_organization_id, u.current_project_id from app_user u where u.id = ?`,
    [userId],
  );
  return user ?? null;
}

/** The project with this API token, and whether it has any active flag (remote config); null if none. */
export async function projectByTokenWithFlags(em: EntityManager, token: string) {
  const [project] = await rows<{ api_token: string; has_flags: boolean }>(
    em,
    `select p.api_token,
            exists(select 1 from feature_flag f where f.project_id = p.id and f.active and not f.deleted) as has_flags
       from project p where p.api_token = ?`,
    [token],
  );
  return project ?? null;
}

// ---- authentication's reads (api/http/auth.ts) ----

/** A project with `is_member`: whether the user `userRef` (an SQL expression) belongs to its organization. */
const projectWithMembership = (userRef: string) =>
  `select p.*, exists(select 1 from organization_membership m
                       where m.organization_id = p.organization_id and m.user_id = ${userRef}) as is_member
     from project p`;

/**
 * The active key with this hash, its user's current project, and (`withProject`) the project `projectId`
 * or else the user's current one, with membership, in one round trip. The key's columns are prefixed
 * key_; every other column is the project's. Null when no active user holds the key.
 */
export async function keyWithProject(
  em: EntityManager,
  secureValue: string,
  withProject: boolean,
  projectId: number | null,
): Promise<Record<string, any> | null> {
  const [row] = await rows(
    em,
    `select k.id as key_id, k.user_id as key_user_id, k.scopes as key_scopes, k.scoped_teams as key_scoped_teams,
            k.scoped_organizations as key_scoped_organizations, k.last_used_at as key_last_used_at,
            u.current_project_id as key_current_project_id, p.*
       from personal_api_key k join app_user u on u.id = k.user_id
       left join lateral (${projectWithMembership('u.id')}
                           where ? and p.id = coalesce(?::int, u.current_project_id)) p on true
      where k.secure_value = ? and u.is_active`,
    [withProject, projectId, secureValue],
  );
  return row ?? null;
}

export async function touchPersonalApiKey(em: EntityManager, keyId: string) {
  await run(em, `update personal_api_key set last_used_at = now() where id = ?`, [keyId]);
}

/** The project with `is_member` for this user, or null. */
export async function projectWithMembershipOf(em: EntityManager, userId: number, projectId: number) {
  const [project] = await rows<Record<string, any>>(em, `${projectWithMembership('?')} where p.id = ?`, [
    userId,
    projectId,
  ]);
  return project ?? null;
}

/** The lowest-numbered project of an organization the user belongs to, or null. */
export async function firstProjectIdOf(em: EntityManager, userId: number): Promise<number | null> {
  const [project] = await rows<{ id: number }>(
    em,
    `select p.id from project p join organization_membership m on m.organization_id = p.organization_id
      where m.user_id = ? order by p.id limit 1`,
    [userId],
  );
  return project?.id ?? null;
}

/** The active user with the highest membership level (the install's owner), or null. */
export async function installOwner(em: EntityManager) {
  const [owner] = await rows<{ id: number; current_project_id: number | null }>(
    em,
    `select u.id, u.current_project_id from app_user u join organization_membership m on m.user_id = u.id
      where u.is_active order by m.level desc, u.id limit 1`,
  );
  return owner ?? null;
}

export async function deletePersonalApiKeysLabelled(em: EntityManager, userId: number, label: string) {
  await run(em, `delete from personal_api_key where user_id = ? and label = ?`, [userId, label]);
}

export async function userCount(em: EntityManager): Promise<number> {
  const [{ count }] = await rows<{ count: number }>(em, 'select count(*)::int as count from app_user');
  return count;
}

// ---- what a key can see (api/organizations/visibility.ts): arrays are PostgreSQL array literals or null ----

/** The user's organizations with their membership level and member count, narrowed by the scoping given. */
export function organizationsOfUser<T>(
  em: EntityManager,
  userId: number,
  organizations: string | null,
  teams: string | null,
) {
  return rows<T>(
    em,
    `select o.*, m.level,
            (select count(*)::int from organization_membership c where c.organization_id = o.id) as member_count
       from organization o join organization_membership m on m.organization_id = o.id and m.user_id = ?
      where (?::uuid[] is null or o.id = any(?::uuid[]))
        and (?::int[] is null
             or exists (select 1 from project p where p.organization_id = o.id and p.id = any(?::int[])))
      order by o.created_at, o.id`,
    [userId, organizations, organizations, teams, teams],
  );
}

/** The projects of the user's organizations (of one when given), narrowed by the scoping given. */
export function projectsOfUser<T>(
  em: EntityManager,
  userId: number,
  organizations: string | null,
  teams: string | null,
  organizationId: string | null,
) {
  return rows<T>(
    em,
    `select p.* from project p
       join organization_membership m on m.organization_id = p.organization_id and m.user_id = ?
      where (?::uuid[] is null or p.organization_id = any(?::uuid[]))
        and (?::int[] is null or p.id = any(?::int[]))
        and (?::uuid is null or p.organization_id = ?::uuid)
      order by p.id`,
    [userId, organizations, organizations, teams, teams, organizationId, organizationId],
  );
}

export async function currentOrganizationIdOf(em: EntityManager, userId: number): Promise<string | null> {
  const [user] = await rows<{ id: string | null }>(
    em,
    `select current_organization_id as id from app_user where id = ?`,
    [userId],
  );
  return user?.id ?? null;
}

/** The project holding this SDK project API token, or null. */
export async function projectByToken<T>(em: EntityManager, token: string): Promise<T | null> {
  const [project] = await rows<T>(em, `select * from project where api_token = ?`, [token]);
  return project ?? null;
}
