import { defineEntity, p } from '@mikro-orm/core';
import { Organization } from './organization.ts';

/** PostHog's "team": the project every resource belongs to; `api_token` (phc_…) authenticates capture. */
export const Project = defineEntity({
  name: 'Project',
  tableName: 'project',
  properties: {
    id: p.integer().primary().autoincrement(),
    uuid: p.uuid(),
    organizationId: () => p.manyToOne(Organization).mapToPk().fieldName('organization_id').deleteRule('cascade'),
    name: p.string().length(200),
    apiToken: p.string().length(200),
    timezone: p.string().length(240).default('UTC'),
    completedSnippetOnboarding: p.boolean().default(false),
    ingestedEvent: p.boolean().default(false),
    isDemo: p.boolean().default(false),
    /** Days of events to keep (null: forever); enforced by the retention job (shared/retention/). */
    eventRetentionDays: p.integer().nullable(),
    /** Days of session recordings to keep (null: forever). */
    recordingRetentionDays: p.integer().nullable(),
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
  checks: [
    { name: 'project_event_retention_days_check', expression: 'event_retention_days > 0' },
    { name: 'project_recording_retention_days_check', expression: 'recording_retention_days > 0' },
  ],
});
