import { defineEntity, p } from '@mikro-orm/core';

/** An event capture accepted but dropped or altered, and why (PostHog's ingestion_warnings); kept 30 days. */
export const IngestionWarning = defineEntity({
  name: 'IngestionWarning',
  tableName: 'ingestion_warning',
  properties: {
    id: p.bigint().primary().autoincrement(),
    projectId: p.integer(),
    type: p.string().length(100),
    eventUuid: p.uuid().nullable(),
    distinctId: p.string().length(400).nullable(),
    details: p.json<Record<string, unknown>>(),
    timestamp: p.datetime().onCreate(() => new Date()),
  },
  indexes: [
    { name: 'ingestion_warning_project_type_time_idx', properties: ['projectId', 'type', 'timestamp'] },
    { name: 'ingestion_warning_time_idx', properties: ['timestamp'] },
  ],
});
