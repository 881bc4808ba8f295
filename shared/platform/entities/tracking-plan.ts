import { defineEntity, p } from '@mikro-orm/core';
import { Project } from './project.ts';
import { User } from './user.ts';

/** One version of a project's tracking plan (the newest is in force); changes notify `tracking_plan_changed`. */
export const TrackingPlanVersion = defineEntity({
  name: 'TrackingPlanVersion',
  tableName: 'tracking_plan_version',
  properties: {
    id: p.bigint('string').primary().autoincrement(),
    projectId: () => p.manyToOne(Project).mapToPk().fieldName('project_id').deleteRule('cascade'),
    version: p.integer(),
    document: p.json<Record<string, unknown>>(),
    createdById: () => p.manyToOne(User).mapToPk().nullable().fieldName('created_by_id').deleteRule('set null'),
    createdAt: p.datetime().defaultRaw('now()'),
  },
  uniques: [{ name: 'tracking_plan_version_project_version_idx', properties: ['projectId', 'version'] }],
});

/** An event capture held out of the store because it violated the plan (mode quarantine), until replayed or purged. */
export const QuarantinedEvent = defineEntity({
  name: 'QuarantinedEvent',
  tableName: 'quarantined_event',
  properties: {
    id: p.bigint('string').primary().autoincrement(),
    projectId: () => p.manyToOne(Project).mapToPk().fieldName('project_id').deleteRule('cascade'),
    uuid: p.uuid(),
    event: p.string().length(400),
    distinctId: p.string().length(400),
    properties: p.json<Record<string, unknown>>(),
    timestamp: p.datetime(),
    violations: p.json<unknown[]>(),
    planVersion: p.integer(),
    quarantinedAt: p.datetime().defaultRaw('now()'),
  },
  uniques: [{ name: 'quarantined_event_project_uuid_idx', properties: ['projectId', 'uuid'] }],
  indexes: [
    { name: 'quarantined_event_project_event_idx', properties: ['projectId', 'event', 'quarantinedAt'] },
    { name: 'quarantined_event_time_idx', properties: ['quarantinedAt'] },
  ],
});

/** Violations counted per project, event name, plan version and kind (ajv keyword, or unplanned_event). */
export const PlanViolationCount = defineEntity({
  name: 'PlanViolationCount',
  tableName: 'plan_violation_count',
  properties: {
    projectId: () => p.manyToOne(Project).mapToPk().primary().fieldName('project_id').deleteRule('cascade'),
    event: p.string().length(400).primary(),
    planVersion: p.integer().primary(),
    kind: p.string().length(100).primary(),
    count: p.bigint('string').defaultRaw('0'),
    lastSeenAt: p.datetime().defaultRaw('now()'),
  },
});

/** A quarantine replay: its filter, who asked, and what it did (run in the request or by the worker). */
export const TrackingPlanReplay = defineEntity({
  name: 'TrackingPlanReplay',
  tableName: 'tracking_plan_replay',
  properties: {
    id: p.bigint('string').primary().autoincrement(),
    projectId: () => p.manyToOne(Project).mapToPk().fieldName('project_id').deleteRule('cascade'),
    filter: p.json<Record<string, unknown>>().defaultRaw(`'{}'`),
    requestedById: () => p.manyToOne(User).mapToPk().nullable().fieldName('requested_by_id').deleteRule('set null'),
    createdAt: p.datetime().defaultRaw('now()'),
    status: p.string().length(20).default('queued'),
    selected: p.bigint('string').defaultRaw('0'),
    stored: p.bigint('string').defaultRaw('0'),
    stillViolating: p.bigint('string').defaultRaw('0'),
    dropped: p.bigint('string').defaultRaw('0'),
    finishedAt: p.datetime().nullable(),
    lastError: p.text().nullable(),
  },
  indexes: [
    {
      name: 'tracking_plan_replay_project_idx',
      columns: [{ name: 'project_id' }, { name: 'created_at', sort: 'desc' }],
    },
  ],
});
