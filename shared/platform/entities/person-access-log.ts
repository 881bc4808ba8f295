import { defineEntity, p } from '@mikro-orm/core';
import { Project } from './project.ts';
import { User } from './user.ts';

/** One API read that returned persons' data: who, how, whose (shared/access-log). */
export const PersonAccessLog = defineEntity({
  name: 'PersonAccessLog',
  tableName: 'person_access_log',
  properties: {
    id: p.bigint().primary().autoincrement(),
    projectId: () => p.manyToOne(Project).mapToPk().fieldName('project_id').deleteRule('cascade'),
    /** The user who read; null once that user is deleted (the row stays). */
    userId: () => p.manyToOne(User).mapToPk().nullable().fieldName('user_id').deleteRule('set null'),
    /** The personal API key's id when the read was made with one. */
    apiKeyId: p.string().length(50).nullable(),
    action: p.string().length(100),
    personUuids: p.array().columnType('uuid[]'),
    requestId: p.string().length(200).nullable(),
    clientAddress: p.string().length(100).nullable(),
    details: p.json<Record<string, unknown>>().defaultRaw(`'{}'`),
    timestamp: p.datetime().defaultRaw('now()'),
  },
  indexes: [
    {
      name: 'person_access_log_project_time_idx',
      columns: [{ name: 'project_id' }, { name: 'timestamp', sort: 'desc' }],
    },
    { name: 'person_access_log_uuids_idx', properties: ['personUuids'], type: 'gin' },
    { name: 'person_access_log_time_idx', properties: ['timestamp'] },
  ],
});
