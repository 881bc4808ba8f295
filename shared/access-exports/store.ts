// The access_export table: this module is its only writer. A request is recorded pending (in the API's
// transaction), claimed by the worker (running), completed with its archive's path, size and signed
// manifest (completed, with expires_at), or failed; an expired archive's removal is recorded (expired,
// removed_at).
import type { EntityManager } from '@mikro-orm/postgresql';
import { type Expression, sql } from 'kysely';
import { db } from '../platform/db/kysely.ts';

export const ACCESS_EXPORT_STATUSES = ['pending', 'running', 'completed', 'failed', 'expired'] as const;
export type AccessExportStatus = (typeof ACCESS_EXPORT_STATUSES)[number];

/** A timestamptz as ISO 8601 UTC with microseconds (null stays null). */
const iso = (column: Expression<unknown>) =>
  sql<string | null>`to_char(${column} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;

export interface AccessExportView {
  id: string;
  project_id: number;
  status: AccessExportStatus;
  /** The persons exported (uuids), as the request found them. */
  person_uuids: string[];
  /** Their distinct ids when the request was made (the export also covers ids they have gained since). */
  distinct_ids: string[];
  request: Record<string, unknown>;
  requested_by: { user_id: number | null; api_key_id: string | null };
  /** Only events that had arrived by then are exported. */
  cutoff: string;
  created_at: string;
  started_at: string | null;
  completed_at: string | null;
  expires_at: string | null;
  removed_at: string | null;
  attempts: number;
  last_error: string | null;
  size_bytes: number | null;
  manifest_sha256: string | null;
  key_id: string | null;
  /** Base64 of the Ed25519 signature of manifest.json (the archive's manifest.sig). */
  signature: string | null;
  manifest: Record<string, unknown> | null;
}

/** The row with the columns a view shows (and the file's path, which no answer shows). */
const exportRows = (em: EntityManager) =>
  db(em)
    .selectFrom('access_export')
    .select((eb) => [
      eb.cast<string>('id', 'text').as('id'),
      'project_id',
      'status',
      sql<string[]>`person_uuids::text[]`.as('person_uuids'),
      sql<string[]>`person_ids::text[]`.as('person_ids'),
      'distinct_ids',
      'request',
      'created_by_id',
      'api_key_id',
      iso(eb.ref('cutoff')).$notNull().as('cutoff'),
      iso(eb.ref('created_at')).$notNull().as('created_at'),
      iso(eb.ref('started_at')).as('started_at'),
      iso(eb.ref('completed_at')).as('completed_at'),
      iso(eb.ref('expires_at')).as('expires_at'),
      iso(eb.ref('removed_at')).as('removed_at'),
      'attempts',
      'last_error',
      eb.cast<number | null>('size_bytes', 'float8').as('size_bytes'),
      'manifest_sha256',
      'key_id',
      'signature',
      'manifest',
      'file_path',
    ]);

export type AccessExportRow = Awaited<ReturnType<ReturnType<typeof exportRows>['execute']>>[number];

export function exportView(r: AccessExportRow): AccessExportView {
  return {
    id: r.id,
    project_id: r.project_id,
    status: r.status as AccessExportStatus,
    person_uuids: r.person_uuids,
    distinct_ids: r.distinct_ids as string[],
    request: (r.request ?? {}) as Record<string, unknown>,
    requested_by: { user_id: r.created_by_id ?? null, api_key_id: r.api_key_id ?? null },
    cutoff: r.cutoff,
    created_at: r.created_at,
    started_at: r.started_at,
    completed_at: r.completed_at,
    expires_at: r.expires_at,
    removed_at: r.removed_at,
    attempts: r.attempts,
    last_error: r.last_error ?? null,
    size_bytes: r.size_bytes === null ? null : Number(r.size_bytes),
    manifest_sha256: r.manifest_sha256 ?? null,
    key_id: r.key_id ?? null,
    signature: r.signature ?? null,
    manifest: (r.manifest ?? null) as Record<string, unknown> | null,
  };
}

/** One export of a project (any project: `projectId` null), or undefined. */
export async function exportById(
  em: EntityManager,
  projectId: number | null,
  id: string,
): Promise<AccessExportRow | undefined> {
  let query = exportRows(em).where('id', '=', id);
  if (projectId !== null) query = query.where('project_id', '=', projectId);
  return query.executeTakeFirst();
}

export interface NewAccessExport {
  projectId: number;
  userId: number | null;
  apiKeyId: string | null;
  personUuids: string[];
  personIds: string[];
  distinctIds: string[];
  request: Record<string, unknown>;
}

/** Records a pending export (in the caller's transaction); its cutoff is the transaction's time. */
export async function insertExport(em: EntityManager, row: NewAccessExport): Promise<AccessExportRow> {
  const { id } = await db(em)
    .insertInto('access_export')
    .values({
      project_id: row.projectId,
      created_by_id: row.userId,
      api_key_id: row.apiKeyId,
      person_uuids: sql<string[]>`${row.personUuids}::uuid[]`,
      person_ids: sql<string[]>`${row.personIds}::bigint[]`,
      distinct_ids: sql<string[]>`${row.distinctIds}::text[]`,
      request: sql<Record<string, unknown>>`${JSON.stringify(row.request)}::jsonb`,
    })
    .returning(sql<string>`id::text`.as('id'))
    .executeTakeFirstOrThrow();
  return (await exportById(em, row.projectId, id))!;
}

/**
 * The worker's claim: a pending export (or a running one whose worker died: the job is retried) becomes
 * running, its attempt counted. Undefined when it is done, failed, expired or gone.
 */
export async function claimExport(em: EntityManager, id: string): Promise<AccessExportRow | undefined> {
  const claimed = await db(em)
    .updateTable('access_export')
    .set((eb) => ({
      status: 'running',
      attempts: eb('attempts', '+', 1),
      started_at: sql`coalesce(started_at, now())`,
    }))
    .where('id', '=', id)
    .where('status', 'in', ['pending', 'running'])
    .returning('id')
    .executeTakeFirst();
  return claimed ? exportById(em, null, id) : undefined;
}

export interface CompletedExport {
  filePath: string;
  sizeBytes: number;
  manifest: Record<string, unknown>;
  manifestSha256: string;
  signature: string;
  keyId: string;
  completedAt: string;
  ttlHours: number;
}

/** Marks a running export completed; false when it was not running any more (another attempt finished it). */
export async function completeExport(em: EntityManager, id: string, done: CompletedExport): Promise<boolean> {
  const result = await db(em)
    .updateTable('access_export')
    .set({
      status: 'completed',
      file_path: done.filePath,
      size_bytes: String(done.sizeBytes),
      manifest: sql`${JSON.stringify(done.manifest)}::jsonb`,
      manifest_sha256: done.manifestSha256,
      signature: done.signature,
      key_id: done.keyId,
      completed_at: sql`${done.completedAt}::timestamptz`,
      expires_at: sql`${done.completedAt}::timestamptz + make_interval(hours => ${done.ttlHours})`,
      last_error: null,
    })
    .where('id', '=', id)
    .where('status', '=', 'running')
    .executeTakeFirst();
  return Number(result.numUpdatedRows) === 1;
}

/** Notes an attempt's error; `final`: the export failed (its attempts are spent). */
export async function noteExportError(em: EntityManager, id: string, error: string, final: boolean): Promise<void> {
  await db(em)
    .updateTable('access_export')
    .set({ last_error: error.slice(0, 2000), ...(final ? { status: 'failed' } : {}) })
    .where('id', '=', id)
    .where('status', 'in', ['pending', 'running'])
    .execute();
}

/** Exports waiting for a worker (pending), oldest first: the reconciler hands them to the queue again. */
export async function pendingExportIds(em: EntityManager, limit = 1000): Promise<string[]> {
  const found = await db(em)
    .selectFrom('access_export')
    .select(sql<string>`id::text`.as('id'))
    .where('status', 'in', ['pending'])
    .orderBy('created_at')
    .limit(limit)
    .execute();
  return found.map((r) => r.id);
}

/** Completed exports past their expiry, with their files, oldest first. */
export function expiredExports(em: EntityManager, now: Date, limit = 1000) {
  return db(em)
    .selectFrom('access_export')
    .select([sql<string>`id::text`.as('id'), 'file_path'])
    .where('status', '=', 'completed')
    .where('expires_at', '<=', now)
    .orderBy('expires_at')
    .limit(limit)
    .execute();
}

/** Records an archive's removal: expired, removed_at now; false if it was not completed any more. */
export async function markExpired(em: EntityManager, id: string): Promise<boolean> {
  const result = await db(em)
    .updateTable('access_export')
    .set({ status: 'expired', removed_at: sql`now()` })
    .where('id', '=', id)
    .where('status', '=', 'completed')
    .executeTakeFirst();
  return Number(result.numUpdatedRows) === 1;
}
