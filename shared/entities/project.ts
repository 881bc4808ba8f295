import { defineEntity, p } from '@mikro-orm/core';
import { Organization } from './organization.ts';

/** PostHog's "team": the project every resource belongs to; `api_token` (phc_…) authenticates capture. */
export const Project = defineEntity({
  name: 'Project',
  tableName: 'project',
  properties: {
    id: p.integer().primary(),
    uuid: p.uuid(),
    organizationId: () => p.manyToOne(Organization).mapToPk().fieldName('organization_id').deleteRule('cascade'),
    name: p.string().length(200),
    apiToken: p.string().length(200),
    timezone: p.string().length(240).default('UTC'),
    completedSnippetOnboarding: p.boolean().default(false),
    ingestedEvent: p.boolean().default(false),
    isDemo: p.boolean().default(false),
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
  uniques: [{ properties: ['uuid'] }, { properties: ['apiToken'] }],
  indexes: [{ name: 'project_organization_idx', properties: ['organizationId'] }],
});
