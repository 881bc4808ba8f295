// Creating organizations, projects, users and personal API keys: one implementation for the
// bootstrap command, the management command and the tests.
import type { EntityManager } from '@mikro-orm/postgresql';
import { sql, type Expression, type InferResult, type Kysely, type Selectable } from 'kysely';
import { randomUUID } from 'node:crypto';
import {
  generateKeyId,
  generatePersonalApiKey,
  generateProjectApiToken,
  hashPersonalApiKey,
  maskPersonalApiKey,
} from '../platform/auth/tokens.ts';
import { isValidScope } from '../platform/auth/scopes.ts';
import { db, type DB, prepared } from '../platform/db/kysely.ts';
import { isUuid } from '../platform/db/sql.ts';
import { Organization, OrganizationMembership, PersonalApiKey, Project, User } from '../platform/entities/index.ts';

/** A project as its table holds it (what a project route sees as `ctx.state.project`). */
export type ProjectRow = Selectable<DB['project']>;

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
    (await db(em).selectFrom('organization').select('id').where('id', '=', organizationId).executeTakeFirst()) !==
      undefined;
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
  const taken = await db(em)
    .selectFrom('app_user')
    .select('id')
    .where((eb) => eb(eb.fn('lower', ['email']), '=', eb.fn('lower', [eb.val(input.email)])))
    .executeTakeFirst();
  if (taken) throw new AccountError(`There is already a user with the email ${input.email}`);
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
  await em.upsert(
    OrganizationMembership,
    { organizationId, userId, level },
    { onConflictFields: ['organizationId', 'userId'], onConflictAction: 'merge', onConflictMergeFields: ['level'] },
  );
}

/** A deactivated user's keys answer 401 at once; reactivating brings them back. */
export async function setUserActive(em: EntityManager, userId: number, active: boolean) {
  await db(em).updateTable('app_user').set({ is_active: active }).where('id', '=', userId).execute();
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
    // The projects and organizations named that the user is a member of, against how many were named.
    const member = db(em).selectFrom('organization_membership as m').where('m.user_id', '=', input.userId);
    const teams = [...new Set(input.scopedTeams ?? [])];
    const organizations = [...new Set(input.scopedOrganizations ?? [])];
    const teamsFound =
      teams.length === 0
        ? []
        : await member
            .innerJoin('project as p', 'p.organization_id', 'm.organization_id')
            .select('p.id')
            .where('p.id', 'in', teams)
            .execute();
    const organizationsFound =
      organizations.length === 0
        ? []
        : await member
            .select('m.organization_id')
            .where(sql<string>`m.organization_id::text`, 'in', organizations)
            .execute();
    if (teamsFound.length < teams.length || organizationsFound.length < organizations.length)
      throw new AccountError('You must be a member of all organizations/teams that you are scoping the key to.');
  }
  if (limit !== null) {
    const count = await em.count(PersonalApiKey, { userId: input.userId });
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
  const changed = await db(em)
    .updateTable('personal_api_key')
    .set({ secure_value: hashPersonalApiKey(value), mask_value: maskPersonalApiKey(value), last_rolled_at: sql`now()` })
    .where('id', '=', keyId)
    .executeTakeFirst();
  if (changed.numUpdatedRows === 0n) throw new AccountError(`No personal API key with id ${keyId}`);
  return value;
}

export async function revokePersonalApiKey(em: EntityManager, keyId: string): Promise<void> {
  const changed = await db(em).deleteFrom('personal_api_key').where('id', '=', keyId).executeTakeFirst();
  if (changed.numDeletedRows === 0n) throw new AccountError(`No personal API key with id ${keyId}`);
}

/** A new phc_ token for a project (PostHog's reset_token); SDKs holding the old one get 401. */
export async function rotateProjectToken(em: EntityManager, projectId: number): Promise<string> {
  const token = generateProjectApiToken();
  const changed = await db(em)
    .updateTable('project')
    .set({ api_token: token, updated_at: sql`now()` })
    .where('id', '=', projectId)
    .executeTakeFirst();
  if (changed.numUpdatedRows === 0n) throw new AccountError(`No project with id ${projectId}`);
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

/** The columns of a user another row names (creator, owner…), as serializers show them (api/users/serializers.ts). */
export const USER_COLUMNS = [
  'id',
  'uuid',
  'distinct_id',
  'first_name',
  'last_name',
  'email',
  'is_email_verified',
  'hedgehog_config',
  'role_at_organization',
] as const;

/** Columns of app_user as `<alias>_<column>` so one row can carry several users. */
export const userColumns = (alias: string, prefix: string) =>
  USER_COLUMNS.map((c) => `${alias}.${c} as ${prefix}_${c}`).join(', ');

export async function isOrganizationMember(em: EntityManager, organizationId: string, userId: number) {
  const found = await db(em)
    .selectFrom('organization_membership')
    .select('id')
    .where('organization_id', '=', organizationId)
    .where('user_id', '=', userId)
    .executeTakeFirst();
  return found !== undefined;
}

export async function findPersonalApiKey(em: EntityManager, keyId: string) {
  const key = await db(em).selectFrom('personal_api_key').selectAll().where('id', '=', keyId).executeTakeFirst();
  return key ?? null;
}

/** The user (USER_COLUMNS, each as `user_<column>`) with their current organization and project. */
export async function findUserWithCurrent(em: EntityManager, userId: number) {
  const user = await db(em)
    .selectFrom('app_user as u')
    .select([
      'u.id as user_id',
      'u.uuid as user_uuid',
      'u.distinct_id as user_distinct_id',
      'u.first_name as user_first_name',
      'u.last_name as user_last_name',
      'u.email as user_email',
      'u.is_email_verified as user_is_email_verified',
      'u.hedgehog_config as user_hedgehog_config',
      'u.role_at_organization as user_role_at_organization',
      'u.current_organization_id',
      'u.current_project_id',
    ])
    .where('u.id', '=', userId)
    .executeTakeFirst();
  return user ?? null;
}

/** The project with this API token, and whether it has any active flag (remote config); null if none. */
export async function projectByTokenWithFlags(em: EntityManager, token: string) {
  const project = await db(em)
    .selectFrom('project as p')
    .select((eb) => [
      'p.api_token',
      eb
        .exists(
          eb
            .selectFrom('feature_flag as f')
            .select('f.id')
            .whereRef('f.project_id', '=', 'p.id')
            .where('f.active', '=', true)
            .where('f.deleted', '=', false),
        )
        .as('has_flags'),
    ])
    .where('p.api_token', '=', token)
    .executeTakeFirst();
  return project ?? null;
}

// ---- authentication's reads (api/http/auth.ts) ----

/** keyWithProject()'s statement, `secureValue` and `projectId` standing for the values it is run with. */
const keyWithProjectQuery = (kysely: Kysely<DB>, secureValue: string, withProject: boolean, projectId: number | null) =>
  kysely
    .selectFrom('personal_api_key as k')
    .innerJoin('app_user as u', 'u.id', 'k.user_id')
    .leftJoinLateral(
      (eb) =>
        eb
          .selectFrom('project as p')
          .selectAll('p')
          .select((eb) => isMember(eb.ref('u.id')).as('is_member'))
          .where(sql.lit(withProject))
          .where('p.id', '=', eb.fn.coalesce(sql<number | null>`${projectId}::int`, 'u.current_project_id'))
          .as('p'),
      (join) => join.onTrue(),
    )
    .select([
      'k.id as key_id',
      'k.user_id as key_user_id',
      'k.scopes as key_scopes',
      'k.scoped_teams as key_scoped_teams',
      'k.scoped_organizations as key_scoped_organizations',
      'k.last_used_at as key_last_used_at',
      'u.current_project_id as key_current_project_id',
    ])
    .selectAll('p')
    .where('k.secure_value', '=', secureValue)
    .where('u.is_active', '=', true);

/** What keyWithProject() finds. */
export type KeyWithProject = InferResult<ReturnType<typeof keyWithProjectQuery>>[number];

// keyWithProject()'s statement, prepared once per shape (with and without the project).
const keyWithProjectStatements = new Map(
  [true, false].map((withProject) => [
    withProject,
    prepared((kysely: Kysely<DB>, secureValue: string, projectId: number | null) =>
      keyWithProjectQuery(kysely, secureValue, withProject, projectId),
    ),
  ]),
);

/**
 * The active key with this hash, its user's current project, and (`withProject`) the project `projectId`
 * or else the user's current one, with `is_member` (whether the user belongs to its organization), in one
 * round trip. The key's columns are prefixed key_; every other column is the project's, null when there is
 * no such project. Undefined when no active user holds the key.
 */
export async function keyWithProject(
  em: EntityManager,
  secureValue: string,
  withProject: boolean,
  projectId: number | null,
): Promise<KeyWithProject | undefined> {
  const [found] = await keyWithProjectStatements.get(withProject)!(em, secureValue, projectId);
  return found;
}

export async function touchPersonalApiKey(em: EntityManager, keyId: string) {
  await db(em).updateTable('personal_api_key').set({ last_used_at: sql`now()` }).where('id', '=', keyId).execute();
}

/** Whether the user `userId` (a value or a column) belongs to the organization of the project `p` in scope. */
const isMember = (userId: number | Expression<number>) =>
  sql<boolean>`exists(select 1 from organization_membership m where m.organization_id = p.organization_id and m.user_id = ${userId})`;

/** The project with `is_member` for this user, or null. */
export async function projectWithMembershipOf(em: EntityManager, userId: number, projectId: number) {
  const project = await db(em)
    .selectFrom('project as p')
    .selectAll('p')
    .select(isMember(userId).as('is_member'))
    .where('p.id', '=', projectId)
    .executeTakeFirst();
  return project ?? null;
}

/** The lowest-numbered project of an organization the user belongs to, or null. */
export async function firstProjectIdOf(em: EntityManager, userId: number): Promise<number | null> {
  const project = await db(em)
    .selectFrom('project as p')
    .innerJoin('organization_membership as m', 'm.organization_id', 'p.organization_id')
    .select('p.id')
    .where('m.user_id', '=', userId)
    .orderBy('p.id')
    .limit(1)
    .executeTakeFirst();
  return project?.id ?? null;
}

/** The active user with the highest membership level (the install's owner), or null. */
export async function installOwner(em: EntityManager) {
  const owner = await db(em)
    .selectFrom('app_user as u')
    .innerJoin('organization_membership as m', 'm.user_id', 'u.id')
    .select(['u.id', 'u.current_project_id'])
    .where('u.is_active', '=', true)
    .orderBy('m.level', 'desc')
    .orderBy('u.id')
    .limit(1)
    .executeTakeFirst();
  return owner ?? null;
}

export async function deletePersonalApiKeysLabelled(em: EntityManager, userId: number, label: string) {
  await db(em).deleteFrom('personal_api_key').where('user_id', '=', userId).where('label', '=', label).execute();
}

export async function userCount(em: EntityManager): Promise<number> {
  return em.count(User);
}

// ---- what a key can see (api/organizations/visibility.ts): null scoping is no narrowing ----

/** The user's organizations with their membership level and member count, narrowed by the scoping given. */
export function organizationsOfUser(
  em: EntityManager,
  userId: number,
  organizations: string[] | null,
  teams: number[] | null,
) {
  return db(em)
    .selectFrom('organization as o')
    .innerJoin('organization_membership as m', (join) =>
      join.onRef('m.organization_id', '=', 'o.id').on('m.user_id', '=', userId),
    )
    .selectAll('o')
    .select((eb) => [
      'm.level',
      eb
        .selectFrom('organization_membership as c')
        .select(eb.cast<number>(eb.fn.countAll(), 'integer').as('n'))
        .whereRef('c.organization_id', '=', 'o.id')
        .$asScalar()
        .$notNull()
        .as('member_count'),
    ])
    .$if(organizations !== null, (q) => q.where('o.id', 'in', organizations ?? []))
    .$if(teams !== null, (q) =>
      q.where((eb) =>
        eb.exists(
          eb
            .selectFrom('project as p')
            .select('p.id')
            .whereRef('p.organization_id', '=', 'o.id')
            .where('p.id', 'in', teams ?? []),
        ),
      ),
    )
    .orderBy('o.created_at')
    .orderBy('o.id')
    .execute();
}

/** The projects of the user's organizations (of one when given), narrowed by the scoping given. */
export function projectsOfUser(
  em: EntityManager,
  userId: number,
  organizations: string[] | null,
  teams: number[] | null,
  organizationId: string | null,
): Promise<ProjectRow[]> {
  return db(em)
    .selectFrom('project as p')
    .innerJoin('organization_membership as m', (join) =>
      join.onRef('m.organization_id', '=', 'p.organization_id').on('m.user_id', '=', userId),
    )
    .selectAll('p')
    .$if(organizations !== null, (q) => q.where('p.organization_id', 'in', organizations ?? []))
    .$if(teams !== null, (q) => q.where('p.id', 'in', teams ?? []))
    .$if(organizationId !== null, (q) => q.where('p.organization_id', '=', organizationId ?? ''))
    .orderBy('p.id')
    .execute();
}

export async function currentOrganizationIdOf(em: EntityManager, userId: number): Promise<string | null> {
  const user = await db(em)
    .selectFrom('app_user')
    .select('current_organization_id')
    .where('id', '=', userId)
    .executeTakeFirst();
  return user?.current_organization_id ?? null;
}

/** The project holding this SDK project API token, or null. */
export async function projectByToken(em: EntityManager, token: string): Promise<ProjectRow | null> {
  const project = await db(em).selectFrom('project').selectAll().where('api_token', '=', token).executeTakeFirst();
  return project ?? null;
}

/** Capture's mark that a project has received events (PostHog's ingested_event); a no-op once set. */
export async function markProjectIngesting(em: EntityManager, projectId: number): Promise<void> {
  await db(em)
    .updateTable('project')
    .set({ ingested_event: true })
    .where('id', '=', projectId)
    .where((eb) => eb.not(eb.ref('ingested_event')))
    .execute();
}

/** A project's editable settings (PATCH on the project): those given are set; answers its name. */
export async function updateProjectSettings(
  em: EntityManager,
  projectId: number,
  settings: { name?: string; event_retention_days?: number | null; recording_retention_days?: number | null },
): Promise<{ name: string }> {
  return db(em)
    .updateTable('project')
    .set({ ...settings, updated_at: sql<Date>`now()` })
    .where('id', '=', projectId)
    .returning('name')
    .executeTakeFirstOrThrow();
}
