import { defineEntity, p } from '@mikro-orm/core';
import { User } from './user.ts';

export const Organization = defineEntity({
  name: 'Organization',
  tableName: 'organization',
  properties: {
    id: p.uuid().primary(),
    name: p.string().length(64),
    createdAt: p
      .datetime()
      .defaultRaw('now()')
      .onCreate(() => new Date()),
    updatedAt: p
      .datetime()
      .defaultRaw('now()')
      .onCreate(() => new Date())
      .onUpdate(() => new Date()),
  },
});

export const OrganizationMembership = defineEntity({
  name: 'OrganizationMembership',
  tableName: 'organization_membership',
  properties: {
    id: p.integer().primary().autoincrement(),
    organizationId: () => p.manyToOne(Organization).mapToPk().fieldName('organization_id').deleteRule('cascade'),
    userId: () => p.manyToOne(User).mapToPk().fieldName('user_id').deleteRule('cascade'),
    /** PostHog's levels: 1 member, 8 admin, 15 owner. */
    level: p.smallint().default(1),
    joinedAt: p
      .datetime()
      .defaultRaw('now()')
      .onCreate(() => new Date()),
  },
  uniques: [{ properties: ['organizationId', 'userId'] }],
  indexes: [{ name: 'organization_membership_user_idx', properties: ['userId'] }],
});
