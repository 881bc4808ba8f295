// Creating organizations, projects, users and personal API keys: one implementation for the
// bootstrap command, the management command and the tests.
import type { EntityManager } from '@mikro-orm/postgresql';
import { randomUUID } from 'node:crypto';
import { generateKeyId, generatePersonalApiKey, generateProjectApiToken, hashPersonalApiKey, maskPersonalApiKey } from './auth/tokens.ts';
import { isValidScope } from './auth/scopes.ts';
import { Organization, OrganizationMembership, PersonalApiKey, Project, User } from './entities/index.ts';

export async function createOrganization(em: EntityManager, name: string) {
  const organization = em.create(Organization, { id: randomUUID(), name });
  await em.persist(organization).flush();
  return organization;
}

export async function createProject(em: EntityManager, organizationId: string, name: string, timezone = 'UTC') {
  const project = em.create(Project, { uuid: randomUUID(), organizationId, name, apiToken: generateProjectApiToken(), timezone });
  await em.persist(project).flush();
  return project;
}

export async function createUser(
  em: EntityManager,
  input: { email: string; firstName?: string; lastName?: string; organizationId: string; level?: number; currentProjectId?: number },
) {
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

export class InvalidScopeError extends Error {}

/** Creates a key and returns its plain value, the only time it exists outside the caller. */
export async function createPersonalApiKey(
  em: EntityManager,
  input: { userId: number; label: string; scopes: string[] | null; scopedTeams?: number[] | null; scopedOrganizations?: string[] | null },
) {
  for (const scope of input.scopes ?? []) if (!isValidScope(scope)) throw new InvalidScopeError(`Invalid scope: ${scope}`);
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

/** A new install's first organization, project, user and all-scopes key. */
export async function bootstrapInstall(em: EntityManager, input: { email: string; organizationName?: string; projectName?: string }) {
  const organization = await createOrganization(em, input.organizationName ?? 'Default organization');
  const project = await createProject(em, organization.id, input.projectName ?? 'Default project');
  const user = await createUser(em, { email: input.email, organizationId: organization.id, level: 15, currentProjectId: project.id });
  const { key, value } = await createPersonalApiKey(em, { userId: user.id, label: 'bootstrap', scopes: ['*'] });
  return { organization, project, user, key, apiKey: value };
}
