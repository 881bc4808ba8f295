import { defineEntity, p } from '@mikro-orm/core';
import { Project } from './project.ts';

/** What one retention run removed from one project (shared/retention/): counts per store, cutoffs, times. */
export const RetentionRun = defineEntity({
  name: 'RetentionRun',
  tableName: 'retention_run',
  properties: {
    id: p.bigint('string').primary().autoincrement(),
    projectId: () => p.manyToOne(Project).mapToPk().fieldName('project_id').deleteRule('cascade'),
    jobId: p.string().length(200).nullable(),
    startedAt: p.datetime(),
    finishedAt: p.datetime(),
    eventCutoff: p.datetime().nullable(),
    recordingCutoff: p.datetime().nullable(),
    eventsDeleted: p.bigint('string').defaultRaw('0'),
    eventsInDroppedPartitions: p.bigint('string').defaultRaw('0'),
    partitionsDropped: p.array().defaultRaw(`'{}'`),
    recordingsDeleted: p.bigint('string').defaultRaw('0'),
    snapshotsDeleted: p.bigint('string').defaultRaw('0'),
  },
  indexes: [
    {
      name: 'retention_run_project_idx',
      columns: [{ name: 'project_id' }, { name: 'started_at', sort: 'desc' }],
    },
  ],
});
