import { defineEntity, p } from '@mikro-orm/core';

export const Organization = defineEntity({
  name: 'Organization',
  tableName: 'organization',
  properties: {
    id: p.uuid().primary(),
    name: p.string().length(64),
    createdAt: p.datetime().onCreate(() => new Date()),
    updatedAt: p
      .datetime()
      .onCreate(() => new Date())
      .onUpdate(() => new Date()),
  },
});

export const OrganizationMembership = defineEntity({
  name: 'OrganizationMembership',
  tableName: 'organization_membership',
  properties: {
    id: p.integer().primary(),
    organizationId: p.uuid(),
    userId: p.integer(),
    /** PostHog's levels: 1 member, 8 admin, 15 owner. */
    level: p.smallint().default(1),
    joinedAt: p.datetime().onCreate(() => new Date()),
  },
});
