import { defineEntity, p } from '@mikro-orm/core';
import { User } from './user.ts';

/** PostHog's activity log: who changed what. Project and organization are plain ids (the log outlives them). */
export const ActivityLog = defineEntity({
  name: 'ActivityLog',
  tableName: 'activity_log',
  properties: {
    id: p.uuid().primary(),
    projectId: p.integer().nullable(),
    organizationId: p.uuid().nullable(),
    userId: () => p.manyToOne(User).mapToPk().nullable().fieldName('user_id').deleteRule('set null'),
    isSystem: p.boolean().default(false),
    scope: p.string().length(79),
    itemId: p.string().length(72).nullable(),
    activity: p.string().length(79),
    detail: p.json<Record<string, unknown>>().nullable(),
    createdAt: p.datetime().defaultRaw('now()'),
  },
  indexes: [
    {
      name: 'activity_log_scope_idx',
      columns: [{ name: 'project_id' }, { name: 'scope' }, { name: 'item_id' }, { name: 'created_at', sort: 'desc' }],
    },
  ],
});
