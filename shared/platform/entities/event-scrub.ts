import { defineEntity, p } from '@mikro-orm/core';
import { Project } from './project.ts';
import { User } from './user.ts';

/** A scrub by content: events matching a filter deleted or stripped of keys, or recordings deleted (shared/scrubs). */
export const EventScrub = defineEntity({
  name: 'EventScrub',
  tableName: 'event_scrub',
  properties: {
    id: p.bigint('string').primary().autoincrement(),
    projectId: () => p.manyToOne(Project).mapToPk().fieldName('project_id').deleteRule('cascade'),
    /** 'events' or 'recordings'. */
    target: p.string().length(20),
    /** 'delete' or 'strip_properties'. */
    action: p.string().length(30),
    /** 'now' or 'off_peak'. */
    mode: p.string().length(20),
    filter: p.json<Record<string, unknown>>(),
    status: p.string().length(20).default('pending'),
    cutoff: p.datetime().defaultRaw('now()'),
    runAfter: p.datetime().defaultRaw('now()'),
    createdAt: p.datetime().defaultRaw('now()'),
    createdById: () => p.manyToOne(User).mapToPk().nullable().fieldName('created_by_id').deleteRule('set null'),
    attempts: p.integer().default(0),
    leaseUntil: p.datetime().nullable(),
    startedAt: p.datetime().nullable(),
    completedAt: p.datetime().nullable(),
    cancelledAt: p.datetime().nullable(),
    lastError: p.text().nullable(),
    countsBefore: p.json<Record<string, number>>().nullable(),
    countsAfter: p.json<Record<string, number>>().nullable(),
    rowsChanged: p.json<Record<string, number>>().nullable(),
    receipt: p.json<Record<string, unknown>>().nullable(),
    receiptSignature: p.text().nullable(),
    receiptKeyId: p.string().length(50).nullable(),
  },
  indexes: [
    { name: 'event_scrub_project_idx', properties: ['projectId', 'id'] },
    { name: 'event_scrub_due_idx', properties: ['runAfter'], where: `status in ('pending', 'running')` },
  ],
});
