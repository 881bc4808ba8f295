import { defineEntity, p } from '@mikro-orm/core';
import { Project } from './project.ts';

/** A session recording's metadata; its person by uuid, as events do. */
export const SessionRecording = defineEntity({
  name: 'SessionRecording',
  tableName: 'session_recording',
  properties: {
    id: p.bigint('string').primary().autoincrement(),
    projectId: () => p.manyToOne(Project).mapToPk().fieldName('project_id').deleteRule('cascade'),
    sessionId: p.string().length(200),
    distinctId: p.string().length(400),
    personId: p.uuid().nullable(),
    startTime: p.datetime(),
    endTime: p.datetime(),
    snapshotCount: p.integer().default(0),
    createdAt: p.datetime().defaultRaw('now()'),
  },
  uniques: [{ properties: ['projectId', 'sessionId'] }],
  indexes: [
    { name: 'session_recording_person_idx', properties: ['projectId', 'personId'] },
    { name: 'session_recording_distinct_idx', properties: ['projectId', 'distinctId'] },
  ],
});

/** A recording's snapshot data, by project and session id. */
export const SessionRecordingSnapshot = defineEntity({
  name: 'SessionRecordingSnapshot',
  tableName: 'session_recording_snapshot',
  properties: {
    id: p.bigint('string').primary().autoincrement(),
    projectId: p.integer(),
    sessionId: p.string().length(200),
    timestamp: p.datetime(),
    data: p.json<unknown>(),
    createdAt: p.datetime().defaultRaw('now()'),
  },
  indexes: [{ name: 'session_recording_snapshot_session_idx', properties: ['projectId', 'sessionId', 'timestamp'] }],
});
