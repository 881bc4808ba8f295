import { defineEntity, p } from '@mikro-orm/core';
import { Project } from './project.ts';
import { User } from './user.ts';

/** An event name seen in a project, with PostHog's enterprise fields (description, tags, verification…). */
export const EventDefinition = defineEntity({
  name: 'EventDefinition',
  tableName: 'event_definition',
  properties: {
    id: p.uuid().primary(),
    projectId: () => p.manyToOne(Project).mapToPk().fieldName('project_id').deleteRule('cascade'),
    name: p.string().length(400),
    createdAt: p.datetime().defaultRaw('now()'),
    lastSeenAt: p.datetime().nullable(),
    description: p.text().default(''),
    tags: p.array().defaultRaw(`'{}'`),
    ownerId: () => p.manyToOne(User).mapToPk().nullable().fieldName('owner_id').deleteRule('set null'),
    updatedAt: p.datetime().nullable(),
    updatedById: () => p.manyToOne(User).mapToPk().nullable().fieldName('updated_by_id').deleteRule('set null'),
    verified: p.boolean().default(false),
    verifiedAt: p.datetime().nullable(),
    verifiedById: () => p.manyToOne(User).mapToPk().nullable().fieldName('verified_by_id').deleteRule('set null'),
    hidden: p.boolean().default(false),
    defaultColumns: p.array().defaultRaw(`'{}'`),
    postToSlack: p.boolean().default(false),
  },
  uniques: [{ properties: ['projectId', 'name'] }],
  indexes: [
    {
      name: 'event_definition_name_trgm',
      expression: `create index "event_definition_name_trgm" on "event_definition" using gin (name gin_trgm_ops) with (gin_pending_list_limit = 256)`,
    },
    // The list's default order: last seen (by UTC day), then name.
    {
      name: 'event_definition_project_seen_idx',
      expression: `create index "event_definition_project_seen_idx" on "event_definition" (project_id, ((last_seen_at at time zone 'UTC')::date) desc nulls last, name collate "C")`,
    },
  ],
});

/** How often a definition was read, per day. */
export const EventDefinitionUsage = defineEntity({
  name: 'EventDefinitionUsage',
  tableName: 'event_definition_usage',
  properties: {
    definitionId: () =>
      p.manyToOne(EventDefinition).mapToPk().primary().fieldName('definition_id').deleteRule('cascade'),
    day: p.date().primary(),
    reads: p.integer().default(0),
  },
});
