import { defineEntity, p } from '@mikro-orm/core';
import { Person } from './person.ts';
import { Project } from './project.ts';
import { User } from './user.ts';

/** A cohort: dynamic (its `filters` or `query` select persons) or static (its persons listed in cohort_person). */
export const Cohort = defineEntity({
  name: 'Cohort',
  tableName: 'cohort',
  properties: {
    id: p.integer().primary().autoincrement(),
    projectId: () => p.manyToOne(Project).mapToPk().fieldName('project_id').deleteRule('cascade'),
    name: p.string().length(400).nullable(),
    description: p.string().length(1000).default(''),
    filters: p.json<Record<string, unknown>>().nullable(),
    query: p.json<Record<string, unknown>>().nullable(),
    isStatic: p.boolean().default(false),
    deleted: p.boolean().default(false),
    isCalculating: p.boolean().default(false),
    lastCalculation: p.datetime().nullable(),
    count: p.integer().nullable(),
    version: p.integer().nullable(),
    createdById: () => p.manyToOne(User).mapToPk().nullable().fieldName('created_by_id').deleteRule('set null'),
    createdAt: p.datetime().defaultRaw('now()'),
  },
  indexes: [{ name: 'cohort_project_idx', properties: ['projectId'] }],
});

/** A person of a static cohort (or of a calculated one, at `version`). */
export const CohortPerson = defineEntity({
  name: 'CohortPerson',
  tableName: 'cohort_person',
  properties: {
    cohortId: () =>
      p.manyToOne(Cohort).mapToPk().primary().fieldName('cohort_id').deleteRule('cascade').updateRule('no action'),
    personId: () =>
      p.manyToOne(Person).mapToPk().primary().fieldName('person_id').deleteRule('cascade').updateRule('no action'),
    version: p.integer().nullable(),
  },
  indexes: [{ name: 'cohort_person_person_idx', properties: ['personId'] }],
});
