// Session recordings, the other captured data beside events: one row per session and its snapshots.
// This module is the only writer of both tables: capture stores snapshots, a person's deletion, a
// retention run and a recording scrub delete sessions (each chooses which, and locks them, itself).
import type { EntityManager } from '@mikro-orm/postgresql';
import { sql } from 'kysely';
import { db } from '../platform/db/kysely.ts';

export interface RecordingSnapshot {
  /** `$session_id`, at most 200 characters. */
  sessionId: string;
  distinctId: string;
  /** The person's uuid. */
  personId: string;
  timestamp: Date;
  data: unknown;
}

/** Stores snapshots (inside the caller's transaction): each session's row is created or widened, then the snapshots added. */
export async function storeRecordingSnapshots(
  em: EntityManager,
  projectId: number,
  snapshots: readonly RecordingSnapshot[],
): Promise<void> {
  if (snapshots.length === 0) return;
  const payload = JSON.stringify(
    snapshots.map((s) => ({
      session_id: s.sessionId,
      distinct_id: s.distinctId,
      person_id: s.personId,
      timestamp: s.timestamp.toISOString(),
      data: s.data,
    })),
  );
  const recordset = <T>(columns: string) =>
    sql<T>`jsonb_to_recordset(${payload}::jsonb)`.as<'r'>(sql.raw(`r(${columns})`));
  await db(em)
    .insertInto('session_recording')
    .columns(['project_id', 'session_id', 'distinct_id', 'person_id', 'start_time', 'end_time', 'snapshot_count'])
    .expression((eb) =>
      eb
        .selectFrom(
          recordset<{ session_id: string; distinct_id: string; person_id: string; timestamp: Date }>(
            'session_id text, distinct_id text, person_id uuid, timestamp timestamptz',
          ),
        )
        .select((s) => [
          eb.val(projectId).as('project_id'),
          'r.session_id',
          s.fn.min('r.distinct_id').as('distinct_id'),
          sql<string>`(array_agg(r.person_id))[1]`.as('person_id'),
          s.fn.min('r.timestamp').as('start_time'),
          s.fn.max('r.timestamp').as('end_time'),
          s.fn.countAll<number>().as('snapshot_count'),
        ])
        .groupBy('r.session_id')
        .orderBy('r.session_id'),
    )
    .onConflict((oc) =>
      oc.columns(['project_id', 'session_id']).doUpdateSet((eb) => ({
        start_time: eb.fn('least', ['session_recording.start_time', 'excluded.start_time']),
        end_time: eb.fn('greatest', ['session_recording.end_time', 'excluded.end_time']),
        snapshot_count: eb('session_recording.snapshot_count', '+', eb.ref('excluded.snapshot_count')),
      })),
    )
    .execute();
  await db(em)
    .insertInto('session_recording_snapshot')
    .columns(['project_id', 'session_id', 'timestamp', 'data'])
    .expression((eb) =>
      eb
        .selectFrom(
          recordset<{ session_id: string; timestamp: Date; data: unknown }>(
            'session_id text, timestamp timestamptz, data jsonb',
          ),
        )
        .select([
          eb.val(projectId).as('project_id'),
          'r.session_id',
          'r.timestamp',
          sql<unknown>`coalesce(r.data, 'null'::jsonb)`.as('data'),
        ]),
    )
    .execute();
}

/** Deletes these sessions of a project and their snapshots (inside the caller's transaction, which chose and locked them). */
export async function deleteRecordingSessions(
  em: EntityManager,
  projectId: number,
  sessionIds: readonly string[],
): Promise<{ recordings: number; snapshots: number }> {
  if (sessionIds.length === 0) return { recordings: 0, snapshots: 0 };
  const ids = sql<string>`any(${[...sessionIds]}::text[])`;
  const snapshots = await db(em)
    .deleteFrom('session_recording_snapshot')
    .where('project_id', '=', projectId)
    .where('session_id', '=', ids)
    .executeTakeFirst();
  const recordings = await db(em)
    .deleteFrom('session_recording')
    .where('project_id', '=', projectId)
    .where('session_id', '=', ids)
    .executeTakeFirst();
  return { recordings: Number(recordings.numDeletedRows), snapshots: Number(snapshots.numDeletedRows) };
}

/**
 * The recordings of these persons (by person uuid) or of these distinct ids: each session's row (no
 * snapshot data), oldest first. What an access export lists as the persons' recordings.
 */
export function personRecordings(
  em: EntityManager,
  projectId: number,
  personUuids: readonly string[],
  distinctIds: readonly string[],
) {
  return db(em)
    .selectFrom('session_recording')
    .select((eb) => [
      'session_id',
      'distinct_id',
      eb.cast<string | null>('person_id', 'text').as('person_id'),
      sql<string>`to_char(start_time at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`.as('start_time'),
      sql<string>`to_char(end_time at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`.as('end_time'),
      'snapshot_count',
    ])
    .where('project_id', '=', projectId)
    .where((eb) =>
      eb.or([
        eb('person_id', '=', sql<string>`any(${[...personUuids]}::uuid[])`),
        eb('distinct_id', '=', sql<string>`any(${[...distinctIds]}::text[])`),
      ]),
    )
    .orderBy('start_time')
    .orderBy('session_id')
    .execute();
}
