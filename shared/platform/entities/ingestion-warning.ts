import { defineEntity, p } from '@mikro-orm/core';
import { Project } from './project.ts';

/** An event capture accepted but dropped or altered, and why (PostHog's ingestion_warnings); kept 30 days. */
export const IngestionWarning = defineEntity({
  name: 'IngestionWarning',
  tableName: 'ingestion_warning',
  properties: {
    id: p.bigint().primary().autoincrement(),
    projectId: () => p.manyToOne(Project).mapToPk().fieldName('project_id').deleteRule('cascade'),
    type: p.string().length(100),
    eventUuid: p.uuid().nullable(),
    distinctId: p.string().length(400).nullable(),
    details: p.json<Record<string, unknown>>().defaultRaw(`'{}'`),
    timestamp: p.datetime().defaultRaw('now()'),
  },
  indexes: [
    {
      name: 'ingestion_warning_project_type_time_idx',
      columns: [{ name: 'project_id' }, { name: 'type' }, { name: 'timestamp', sort: 'desc' }],
    },
    { name: 'ingestion_warning_time_idx', properties: ['timestamp'] },
  ],
});
