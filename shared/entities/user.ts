import { defineEntity, p } from '@mikro-orm/core';

export const User = defineEntity({
  name: 'User',
  tableName: 'app_user',
  properties: {
    id: p.integer().primary(),
    uuid: p.uuid().unique(),
    distinctId: p.string().length(200).unique(),
    firstName: p.string().length(150).default(''),
    lastName: p.string().length(150).default(''),
    email: p.string().length(254).unique(),
    isEmailVerified: p.boolean().nullable(),
    isActive: p.boolean().default(true),
    hedgehogConfig: p.json<Record<string, unknown>>().nullable(),
    roleAtOrganization: p.string().length(64).nullable(),
    currentProjectId: p.integer().nullable(),
    currentOrganizationId: p.uuid().nullable(),
    createdAt: p.datetime().onCreate(() => new Date()),
  },
});
