// Recordings scrubbed by content (shared/scrubs asks; shared/events/recordings.ts writes the tables): the
// sessions of some distinct ids that started in a time range, up to the scrub's cutoff by arrival,
// deleted in chunks with their snapshots, snapshots first.
import type { EntityManager } from '@mikro-orm/postgresql';
import { type ExpressionBuilder, sql } from 'kysely';
import { type DB, db } from '../platform/db/kysely.ts';
import { deleteSessionChunk } from './job.ts';

export interface RecordingScrubMatch {
  distinctIds: readonly string[];
  /** Sessions that started in [after, before). */
  after: Date;
  before: Date;
  /** Only recordings stored (created_at) at or before it: an ISO 8601 timestamp. */
  cutoff: string;
}

/** The scrub's conditions on session_recording (beside its project). */
const matches = (eb: ExpressionBuilder<DB, 'session_recording'>, m: RecordingScrubMatch) => [
  eb('distinct_id', '=', sql<string>`any(${[...m.distinctIds]}::text[])`),
  eb('start_time', '>=', m.after),
  eb('start_time', '<', m.before),
  eb('created_at', '<=', sql<Date>`${m.cutoff}::timestamptz`),
];

const matching = (em: EntityManager, projectId: number, m: RecordingScrubMatch) =>
  db(em)
    .selectFrom('session_recording')
    .where('project_id', '=', projectId)
    .where((eb) => eb.and(matches(eb, m)));

/** The matching recordings (sessions) and their snapshots now. */
export async function countScrubRecordings(
  em: EntityManager,
  projectId: number,
  m: RecordingScrubMatch,
): Promise<{ recordings: number; snapshots: number }> {
  const found = await matching(em, projectId, m)
    .select((eb) => [
      eb.fn.countAll<string>().as('recordings'),
      eb.fn
        .coalesce(
          eb.fn.sum<string>(
            eb
              .selectFrom('session_recording_snapshot as s')
              .select((c) => c.fn.countAll().as('n'))
              .where('s.project_id', '=', projectId)
              .whereRef('s.session_id', '=', 'session_recording.session_id'),
          ),
          sql<string>`0`,
        )
        .as('snapshots'),
    ])
    .executeTakeFirstOrThrow();
  return { recordings: Number(found.recordings), snapshots: Number(found.snapshots) };
}

/** Deletes the matching recordings, a chunk of sessions per transaction; `done` after each. Returns the sessions deleted. */
export async function deleteScrubRecordings(
  em: EntityManager,
  projectId: number,
  m: RecordingScrubMatch,
  /** A chunk's sessions, in its transaction. */
  record: (sessions: number, tx: EntityManager) => Promise<void>,
  /** After each chunk committed. */
  done: (sessions: number) => Promise<void>,
): Promise<number> {
  let total = 0;
  for (;;) {
    const n = await em.fork().transactional(async (tx) => {
      const { sessions } = await deleteSessionChunk(tx, projectId, (eb) => eb.and(matches(eb, m)));
      if (sessions === 0) return 0;
      await record(sessions, tx);
      return sessions;
    });
    if (n === 0) return total;
    total += n;
    await done(n);
  }
}
