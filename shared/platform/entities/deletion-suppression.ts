import { defineEntity, p } from '@mikro-orm/core';
import { AsyncDeletion } from './async-deletion.ts';
import { Project } from './project.ts';

/**
 * A distinct id whose later events capture drops (a deletion request asked with suppress=true), until
 * lifted (unsuppress). At most one active row (lifted_at null) per project and distinct id; a lifted
 * row stays, so its request's status keeps the count of events dropped. Changes notify
 * `deletion_suppression_changed` (migration 0049), which the API processes' caches listen to.
 */
export const DeletionSuppression = defineEntity({
  name: 'DeletionSuppression',
  tableName: 'deletion_suppression',
  properties: {
    id: p.bigint('string').primary().autoincrement(),
    projectId: () => p.manyToOne(Project).mapToPk().fieldName('project_id').deleteRule('cascade'),
    distinctId: p.string().length(400),
    requestId: () =>
      p
        .manyToOne(AsyncDeletion)
        .mapToPk()
        .fieldName('request_id')
        .deleteRule('cascade')
        .index('deletion_suppression_request_idx'),
    createdAt: p.datetime().defaultRaw('now()'),
    /** Events capture dropped because of this row. */
    droppedCount: p.bigint('string').defaultRaw('0'),
    /** When unsuppress lifted it; null while active. */
    liftedAt: p.datetime().nullable(),
  },
  uniques: [
    {
      name: 'deletion_suppression_active_idx',
      properties: ['projectId', 'distinctId'],
      where: 'lifted_at is null',
    },
  ],
});
