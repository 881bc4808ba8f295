// Retention queries: projects' settings, counts of the recordings a run removes, their removal in
// chunks and the runs' records. The event table's partitions are the event store's
// (shared/events/partitions.ts); the rules that choose between drops and deletes are in rules.ts.
import type { EntityManager } from '@mikro-orm/postgresql';
import type { Selectable } from 'kysely';
import { type DB, db } from '../platform/db/kysely.ts';
import { type Page, pagedSelect } from '../platform/db/paged.ts';
import { deleteRecordingSessions } from '../events/index.ts';
import type { EventStore } from '../events/index.ts';
import type { ProjectRetention, RetentionCounts } from './rules.ts';

/** Every project with a retention setting, or the one asked for (whether set or not). */
export function projectRetentions(em: EntityManager, projectId?: number): Promise<ProjectRetention[]> {
  const query = db(em)
    .selectFrom('project')
    .select([
      'id as projectId',
      'event_retention_days as eventRetentionDays',
      'recording_retention_days as recordingRetentionDays',
    ])
    .orderBy('id');
  return (
    projectId === undefined
      ? query.where((eb) =>
          eb.or([eb('event_retention_days', 'is not', null), eb('recording_retention_days', 'is not', null)]),
        )
      : query.where('id', '=', projectId)
  ).execute();
}

/** A project's events older than `cutoff`, over every partition (the event store counts them). */
export function countEventsBefore(events: EventStore, projectId: number, cutoff: Date): Promise<number> {
  return events.countEventsBefore(projectId, cutoff);
}

/** A project's recordings that ended before `cutoff`, and their snapshots. */
export async function countRecordingsBefore(
  em: EntityManager,
  projectId: number,
  cutoff: Date,
): Promise<{ recordings: number; snapshots: number }> {
  const row = await db(em)
    .selectNoFrom((eb) => [
      eb
        .cast<number>(
          eb
            .selectFrom('session_recording')
            .select((s) => s.fn.countAll().as('n'))
            .where('project_id', '=', projectId)
            .where('end_time', '<', cutoff),
          'float8',
        )
        .as('recordings'),
      eb
        .cast<number>(
          eb
            .selectFrom('session_recording_snapshot as s')
            .innerJoin('session_recording as r', (join) =>
              join.onRef('r.project_id', '=', 's.project_id').onRef('r.session_id', '=', 's.session_id'),
            )
            .select((s) => s.fn.countAll().as('n'))
            .where('r.project_id', '=', projectId)
            .where('r.end_time', '<', cutoff),
          'float8',
        )
        .as('snapshots'),
    ])
    .executeTakeFirstOrThrow();
  return { recordings: Number(row.recordings), snapshots: Number(row.snapshots) };
}

/** Up to `chunk` recordings of a project that ended before `cutoff`, with their snapshots, in one transaction. */
export async function deleteRecordingsChunk(
  em: EntityManager,
  projectId: number,
  cutoff: Date,
  chunk: number,
): Promise<{ recordings: number; snapshots: number }> {
  return em.transactional(async (tx) => {
    const sessions = await db(tx)
      .selectFrom('session_recording')
      .select('session_id')
      .where('project_id', '=', projectId)
      .where('end_time', '<', cutoff)
      .orderBy('id')
      .limit(chunk)
      .forUpdate()
      .skipLocked()
      .execute();
    if (sessions.length === 0) return { recordings: 0, snapshots: 0 };
    return deleteRecordingSessions(
      tx,
      projectId,
      sessions.map((s) => s.session_id),
    );
  });
}

export interface RetentionRunRecord extends RetentionCounts {
  projectId: number;
  jobId: string | null;
  startedAt: Date;
  finishedAt: Date;
}

export async function insertRetentionRun(em: EntityManager, r: RetentionRunRecord): Promise<void> {
  await db(em)
    .insertInto('retention_run')
    .values({
      project_id: r.projectId,
      job_id: r.jobId,
      started_at: r.startedAt,
      finished_at: r.finishedAt,
      event_cutoff: r.eventCutoff,
      recording_cutoff: r.recordingCutoff,
      events_deleted: String(r.events),
      events_in_dropped_partitions: String(r.eventsInDroppedPartitions),
      partitions_dropped: r.partitionsDropped,
      recordings_deleted: String(r.recordings),
      snapshots_deleted: String(r.snapshots),
    })
    .execute();
}

/** A retention_run row as read (bigint counts as strings). */
export type RetentionRunRow = Selectable<DB['retention_run']>;

/** A page of a project's retention runs, newest first. */
export function retentionRunPage(em: EntityManager, projectId: number, page: Page) {
  return pagedSelect(
    em,
    db(em)
      .selectFrom('retention_run as r')
      .selectAll('r')
      .where('r.project_id', '=', projectId)
      .orderBy('r.started_at', 'desc')
      .orderBy('r.id', 'desc'),
    page,
  );
}
