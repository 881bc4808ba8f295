// The read-access log's public face: every API read that returned persons' data leaves one row
// (who read, how, whose), so "who read this person's data?" has an answer, and an access export can
// hand the person the reads of their data. Recording is one insert per read; listing is by person
// (any of the row's uuids) or by project, newest first.
import type { EntityManager } from '@mikro-orm/postgresql';
import { sql } from 'kysely';
import { db } from '../platform/db/kysely.ts';
import type { Deps } from '../platform/deps.ts';
import { type AccessRow, purgeAccessLog } from './store.ts';

export {
  type AccessRecorder,
  createAccessRecorder,
  type RecordingMode,
  setAccessRecordingForBench,
} from './recorder.ts';
export { purgeAccessLog } from './store.ts';
import { insertAccessRows } from './store.ts';
import { rowOf } from './recorder.ts';

/** What a read was: PostHog-style `<resource>_<verb>` names (person_retrieve, person_list, access_export_download …). */
export type AccessAction = string;

export interface AccessEntry {
  projectId: number;
  userId: number | null;
  apiKeyId: string | null;
  action: AccessAction;
  /** The persons whose data the answer held (a list page: every person on it). */
  personUuids: readonly string[];
  requestId: string | null;
  clientAddress: string | null;
  details?: Record<string, unknown>;
}

/** A recorded read as listed: the row as written (store.ts AccessRow), with its id and its time as ISO text. */
export type AccessRecord = Omit<AccessRow, 'project_id' | 'timestamp'> & { id: string; timestamp: string };

/** Records one read (inside the caller's transaction when there is one); a read of no person records nothing. */
export async function recordPersonAccess(em: EntityManager, entry: AccessEntry): Promise<void> {
  if (entry.personUuids.length === 0) return;
  await insertAccessRows(em, [rowOf(entry)]);
}

/**
 * A project's reads, newest first; of one person when `personUuid` is given; from `since` when given; up to
 * row `throughId` when given.
 */
export async function listPersonAccess(
  em: EntityManager,
  query: {
    projectId: number;
    personUuid?: string;
    since?: Date;
    /** Only rows up to this id: the pages after the first list what the first saw, whatever was read since. */
    throughId?: string;
    limit: number;
    offset: number;
  },
): Promise<AccessRecord[]> {
  let q = db(em)
    .selectFrom('person_access_log')
    .select([
      'id',
      'timestamp',
      'user_id',
      'api_key_id',
      'action',
      'person_uuids',
      'request_id',
      'client_address',
      'details',
    ])
    .where('project_id', '=', query.projectId);
  if (query.personUuid) q = q.where(sql<boolean>`person_uuids @> array[${query.personUuid}]::uuid[]`);
  if (query.since) q = q.where('timestamp', '>=', query.since);
  if (query.throughId) q = q.where(sql<boolean>`id <= ${query.throughId}::bigint`);
  const found = await q
    .orderBy('timestamp', 'desc')
    .orderBy('id', 'desc')
    .limit(query.limit)
    .offset(query.offset)
    .execute();
  return found.map((r) => ({
    id: String(r.id),
    timestamp: new Date(r.timestamp).toISOString(),
    user_id: r.user_id ?? null,
    api_key_id: r.api_key_id ?? null,
    action: r.action,
    person_uuids: r.person_uuids as string[],
    request_id: r.request_id ?? null,
    client_address: r.client_address ?? null,
    details: (r.details ?? {}) as Record<string, unknown>,
  }));
}

/** The daily upkeep's part (scheduler `event-partitions`): reads recorded more than ACCESS_LOG_RETENTION_DAYS ago. */
export async function purgeAccessLogJob(
  _job: unknown,
  deps: Pick<Deps, 'orm' | 'logger' | 'config'>,
): Promise<{ accessLogPurged: number }> {
  const accessLogPurged = await purgeAccessLog(deps.orm.em.fork(), deps.config.accessLog.retentionDays);
  if (accessLogPurged > 0) deps.logger.info({ accessLogPurged }, 'read-access log rows past their retention purged');
  return { accessLogPurged };
}
