import { defineEntity, p } from '@mikro-orm/core';
import { Organization } from './organization.ts';
import { Project } from './project.ts';

export const User = defineEntity({
  name: 'User',
  tableName: 'app_user',
  properties: {
    id: p.integer().primary().autoincrement(),
    uuid: p.uuid(),
    distinctId: p.string().length(200),
    firstName: p.string().length(150).default(''),
    lastName: p.string().length(150).default(''),
    email: p.string().length(254),
    isEmailVerified: p.boolean().nullable(),
    isActive: p.boolean().default(true),
    hedgehogConfig: p.json<Record<string, unknown>>().nullable(),
    roleAtOrganization: p.string().length(64).nullable(),
    currentProjectId: () =>
      p
        .manyToOne(Project)
        .mapToPk()
        .nullable()
        .fieldName('current_project_id')
        .foreignKeyName('app_user_current_project_fk')
        .deleteRule('set null'),
    currentOrganizationId: () =>
      p.manyToOne(Organization).mapToPk().nullable().fieldName('current_organization_id').deleteRule('set null'),
    createdAt: p
      .datetime()
      .defaultRaw('now()')
      .onCreate(() => new Date()),
  },
  uniques: [{ properties: ['uuid'] }, { properties: ['distinctId'] }, { properties: ['email'] }],
});
