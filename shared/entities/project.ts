import { defineEntity, p } from '@mikro-orm/core';

/** PostHog's "team": the project every resource belongs to; `api_token` (phc_…) authenticates capture. */
export const Project = defineEntity({
  name: 'Project',
  tableName: 'project',
  properties: {
    id: p.integer().primary(),
    uuid: p.uuid().unique(),
    organizationId: p.uuid(),
    name: p.string().length(200),
    apiToken: p.string().length(200).unique(),
    timezone: p.string().length(240).default('UTC'),
    completedSnippetOnboarding: p.boolean().default(false),
    ingestedEvent: p.boolean().default(false),
    isDemo: p.boolean().default(false),
    createdAt: p.datetime().onCreate(() => new Date()),
    updatedAt: p
      .datetime()
      .onCreate(() => new Date())
      .onUpdate(() => new Date()),
  },
});
