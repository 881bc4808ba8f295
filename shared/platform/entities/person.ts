import { defineEntity, p } from '@mikro-orm/core';
import { Project } from './project.ts';

/**
 * A person of a project. Events refer to it by `uuid` (as PostHog's do), so a deleted person's events can
 * still be found. `version` counts the changes ingestion made to it.
 */
export const Person = defineEntity({
  name: 'Person',
  tableName: 'person',
  properties: {
    id: p.bigint('string').primary().autoincrement(),
    uuid: p.uuid(),
    projectId: () => p.manyToOne(Project).mapToPk().fieldName('project_id').deleteRule('cascade'),
    properties: p.json<Record<string, unknown>>().defaultRaw(`'{}'`),
    isIdentified: p.boolean().default(false),
    createdAt: p.datetime().defaultRaw('now()'),
    version: p.bigint('string').defaultRaw('0'),
  },
  uniques: [{ properties: ['projectId', 'uuid'] }],
  indexes: [
    // Newest-first listing with a stable tie-break.
    {
      name: 'person_project_created_idx',
      expression: 'create index "person_project_created_idx" on "person" (project_id, created_at desc, id desc)',
    },
    // Property filters, email exact match, and email/name substring search (trigram, leading with the project).
    {
      name: 'person_properties_gin',
      expression:
        'create index "person_properties_gin" on "person" using gin (properties jsonb_path_ops) with (gin_pending_list_limit = 256)',
    },
    {
      name: 'person_email_idx',
      expression: `create index "person_email_idx" on "person" (project_id, (properties->>'email'))`,
    },
    {
      name: 'person_email_trgm',
      expression: `create index "person_email_trgm" on "person" using gin (project_id, (properties->>'email') gin_trgm_ops) with (gin_pending_list_limit = 256)`,
    },
    {
      name: 'person_name_trgm',
      expression: `create index "person_name_trgm" on "person" using gin (project_id, (properties->>'name') gin_trgm_ops) with (gin_pending_list_limit = 256) where (properties->>'name') is not null`,
    },
  ],
});

/**
 * One of a person's distinct ids: unique within its project. `updatedAt`: when it got its current person
 * (a trigger sets it when person_id changes: a merge or a split).
 */
export const PersonDistinctId = defineEntity({
  name: 'PersonDistinctId',
  tableName: 'person_distinct_id',
  properties: {
    id: p.bigint('string').primary().autoincrement(),
    projectId: () => p.manyToOne(Project).mapToPk().fieldName('project_id').deleteRule('cascade'),
    personId: () => p.manyToOne(Person).mapToPk().fieldName('person_id').deleteRule('cascade'),
    distinctId: p.string().length(400),
    version: p.bigint('string').defaultRaw('0'),
    updatedAt: p.datetime().defaultRaw('now()'),
  },
  uniques: [{ properties: ['projectId', 'distinctId'] }],
  indexes: [
    { name: 'person_distinct_id_person_idx', properties: ['personId', 'id'] },
    // Led by updatedAt: an index led by projectId would compete with the unique one for ingestion's
    // lookup (migration 0054).
    { name: 'person_distinct_id_updated_idx', properties: ['updatedAt', 'projectId'] },
  ],
});
