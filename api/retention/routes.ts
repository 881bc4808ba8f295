import type { RetentionCounts } from '../../shared/retention/index.ts';
import { previewRetention } from '../../shared/retention/index.ts';
import { type RetentionRunRow, retentionRunPage } from '../../shared/retention/index.ts';
import { defaultSchedules, nextRun, RETENTION_SCHEDULER, recordedSchedules } from '../../shared/platform/schedules.ts';
import { isoTimestamp } from '../../shared/platform/time.ts';
import { PAGE_QUERY_PROPERTIES, pageOf, paginated, paginatedSchema } from '../http/pagination.ts';
import { defineRoute } from '../http/routes.ts';
import { dateTime, nullableDateTime, nullableInteger, record, stringArray } from '../http/schemas.ts';

const P = '/api/projects/:project_id/retention';

const iso = (date: Date | null) => (date ? date.toISOString() : null);

/** The fields a preview and a run record share, so that one can be compared with the other. */
const countsOf = (c: RetentionCounts) => ({
  event_cutoff: iso(c.eventCutoff),
  recording_cutoff: iso(c.recordingCutoff),
  events: c.events,
  events_in_dropped_partitions: c.eventsInDroppedPartitions,
  partitions_dropped: c.partitionsDropped,
  recordings: c.recordings,
  snapshots: c.snapshots,
});

const countsSchema = {
  event_cutoff: { ...nullableDateTime, description: 'Events before this time are removed (null: events kept forever)' },
  recording_cutoff: {
    ...nullableDateTime,
    description: 'Recordings that ended before this time are removed, with their snapshots (null: kept forever)',
  },
  events: { type: 'integer', description: 'Events removed, by partition drop or by delete' },
  events_in_dropped_partitions: {
    type: 'integer',
    description: 'Of those, events in monthly partitions dropped whole',
  },
  partitions_dropped: {
    ...stringArray,
    description: 'Monthly event partitions dropped whole that held this project’s events',
  },
  recordings: { type: 'integer', description: 'Session recordings removed' },
  snapshots: { type: 'integer', description: 'Their snapshots removed' },
};

const previewSchema = record({
  next_run_at: {
    ...dateTime,
    description: 'When the retention job next runs (the recorded `retention-off-peak` schedule)',
  },
  event_retention_days: nullableInteger,
  recording_retention_days: nullableInteger,
  ...countsSchema,
});

const runSchema = record({
  id: { type: 'integer' },
  job_id: { type: ['string', 'null'] },
  started_at: dateTime,
  finished_at: dateTime,
  ...countsSchema,
});

const serializeRun = (r: RetentionRunRow) => ({
  id: Number(r.id),
  job_id: r.job_id,
  started_at: isoTimestamp(r.started_at),
  finished_at: isoTimestamp(r.finished_at),
  ...countsOf({
    eventCutoff: r.event_cutoff ? new Date(r.event_cutoff) : null,
    recordingCutoff: r.recording_cutoff ? new Date(r.recording_cutoff) : null,
    events: Number(r.events_deleted),
    eventsInDroppedPartitions: Number(r.events_in_dropped_partitions),
    partitionsDropped: r.partitions_dropped,
    recordings: Number(r.recordings_deleted),
    snapshots: Number(r.snapshots_deleted),
  }),
});

export const retentionRoutes = [
  defineRoute({
    method: 'GET',
    path: `${P}/preview`,
    summary: 'What the next retention run removes from this project: counts per store, cutoffs, partitions dropped',
    tags: ['projects'],
    scopes: ['project:read'],
    responses: {
      200: { description: 'The next run, as it would run with the data as it is now', schema: previewSchema },
    },
    handler: async (ctx) => {
      const em = ctx.state.em;
      const { schedules } = await recordedSchedules(em, defaultSchedules(ctx.deps.config));
      const at = nextRun(schedules.find((s) => s.schedulerId === RETENTION_SCHEDULER)!.pattern);
      // The days the preview counted with (ctx.state.project may be the auth cache's, older than a PATCH).
      const preview = await previewRetention(em, ctx.deps.events, ctx.state.project.id, at);
      ctx.body = {
        next_run_at: at.toISOString(),
        event_retention_days: preview.eventRetentionDays,
        recording_retention_days: preview.recordingRetentionDays,
        ...countsOf(preview),
      };
    },
  }),
  defineRoute({
    method: 'GET',
    path: `${P}/runs`,
    summary: 'What each retention run removed from this project, newest first',
    tags: ['projects'],
    scopes: ['project:read'],
    query: { type: 'object', properties: PAGE_QUERY_PROPERTIES },
    responses: { 200: { description: 'A page of run records', schema: paginatedSchema(runSchema) } },
    handler: async (ctx) => {
      const page = pageOf(ctx.state.query);
      const { rows, count } = await retentionRunPage(ctx.state.em, ctx.state.project.id, page);
      ctx.body = paginated(ctx, page, count, rows.map(serializeRun));
    },
  }),
];
