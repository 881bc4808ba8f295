// The event_scrub table: the one module that writes it. A row is the request (its filter, cutoff and
// when it may run), its progress (claim and lease, attempts, last error) and its outcome (counts per
// store before and after, rows changed, the signed receipt).
import type { EntityManager } from '@mikro-orm/postgresql';
import { type Expression, sql } from 'kysely';
import { db } from '../platform/db/kysely.ts';

export type ScrubTarget = 'events' | 'recordings';
export type ScrubAction = 'delete' | 'strip_properties';
export type ScrubMode = 'now' | 'off_peak';
export type ScrubStatus = 'pending' | 'running' | 'completed' | 'failed' | 'cancelled';

/** What a scrub covers, as stored and shown (times ISO 8601). */
export interface ScrubFilter {
  event: string | null;
  properties: unknown[] | Record<string, unknown>;
  after: string;
  before: string;
  distinct_ids: string[] | null;
  /** strip_properties: the keys removed; null for delete. */
  keys: string[] | null;
}

export interface ScrubReceiptView {
  key_id: string;
  algorithm: 'Ed25519';
  /** Base64 of the Ed25519 signature of `signed_content`. */
  signature: string;
  /** The receipt's canonical JSON: exactly the signed bytes (UTF-8). */
  signed_content: string;
}

export interface ScrubView {
  id: string;
  project_id: number;
  target: ScrubTarget;
  action: ScrubAction;
  mode: ScrubMode;
  status: ScrubStatus;
  filter: ScrubFilter;
  cutoff: string;
  run_after: string;
  created_at: string;
  started_at: string | null;
  completed_at: string | null;
  cancelled_at: string | null;
  attempts: number;
  last_error: string | null;
  counts_before: Record<string, number> | null;
  counts_after: Record<string, number> | null;
  rows_changed: Record<string, number> | null;
  receipt: (ScrubReceiptView & { body: Record<string, unknown> }) | null;
}

/** A value as a jsonb parameter. */
// biome-ignore lint/suspicious/noExplicitAny: typed by the column it is written to
const jsonb = (value: unknown) => sql<any>`${JSON.stringify(value)}::jsonb`;

/** A timestamptz as ISO-8601 UTC with microseconds (the cutoff's full precision). */
const iso = (column: Expression<unknown>) =>
  sql<string | null>`to_char(${column} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;

const select = (em: EntityManager) =>
  db(em)
    .selectFrom('event_scrub')
    .select((eb) => [
      eb.cast<string>('id', 'text').as('id'),
      'project_id',
      'target',
      'action',
      'mode',
      'status',
      'filter',
      iso(eb.ref('cutoff')).$notNull().as('cutoff'),
      iso(eb.ref('run_after')).$notNull().as('run_after'),
      iso(eb.ref('created_at')).$notNull().as('created_at'),
      iso(eb.ref('started_at')).as('started_at'),
      iso(eb.ref('completed_at')).as('completed_at'),
      iso(eb.ref('cancelled_at')).as('cancelled_at'),
      'attempts',
      'last_error',
      'counts_before',
      'counts_after',
      'rows_changed',
      'receipt',
      'receipt_signature',
      'receipt_key_id',
    ]);

type Row = Awaited<ReturnType<ReturnType<typeof select>['executeTakeFirstOrThrow']>>;

function view(row: Row, canonical: (body: unknown) => string): ScrubView {
  const { receipt, receipt_signature, receipt_key_id, ...rest } = row;
  return {
    ...rest,
    target: rest.target as ScrubTarget,
    action: rest.action as ScrubAction,
    mode: rest.mode as ScrubMode,
    status: rest.status as ScrubStatus,
    filter: rest.filter as unknown as ScrubFilter,
    counts_before: rest.counts_before as Record<string, number> | null,
    counts_after: rest.counts_after as Record<string, number> | null,
    rows_changed: rest.rows_changed as Record<string, number> | null,
    receipt:
      receipt && receipt_signature && receipt_key_id
        ? {
            key_id: receipt_key_id,
            algorithm: 'Ed25519',
            signature: receipt_signature,
            signed_content: canonical(receipt),
            body: receipt as Record<string, unknown>,
          }
        : null,
  };
}

export interface NewScrub {
  projectId: number;
  target: ScrubTarget;
  action: ScrubAction;
  mode: ScrubMode;
  filter: ScrubFilter;
  /** When it may run: null for now (the transaction's now(), also its cutoff). */
  runAfter: Date | null;
  createdById: number | null;
}

export async function insertScrub(em: EntityManager, s: NewScrub): Promise<string> {
  const row = await db(em)
    .insertInto('event_scrub')
    .values({
      project_id: s.projectId,
      target: s.target,
      action: s.action,
      mode: s.mode,
      filter: jsonb(s.filter),
      run_after: s.runAfter ?? sql<Date>`now()`,
      created_by_id: s.createdById,
    })
    .returning((eb) => eb.cast<string>('id', 'text').as('id'))
    .executeTakeFirstOrThrow();
  return row.id;
}

/** A scrub of the project (projectId null: of any project), or undefined. */
export async function scrubById(
  em: EntityManager,
  projectId: number | null,
  id: string,
  canonical: (body: unknown) => string,
): Promise<ScrubView | undefined> {
  let q = select(em).where('id', '=', id);
  if (projectId !== null) q = q.where('project_id', '=', projectId);
  const row = await q.executeTakeFirst();
  return row ? view(row, canonical) : undefined;
}

/** A page of the project's scrubs of a target, newest first, with the total. */
export async function listScrubs(
  em: EntityManager,
  projectId: number,
  target: ScrubTarget,
  page: { limit: number; offset: number },
  canonical: (body: unknown) => string,
): Promise<{ count: number; results: ScrubView[] }> {
  const [found, total] = await Promise.all([
    select(em)
      .where('project_id', '=', projectId)
      .where('target', '=', target)
      .orderBy('id', 'desc')
      .limit(page.limit)
      .offset(page.offset)
      .execute(),
    db(em)
      .selectFrom('event_scrub')
      .select((eb) => eb.fn.countAll<string>().as('n'))
      .where('project_id', '=', projectId)
      .where('target', '=', target)
      .executeTakeFirstOrThrow(),
  ]);
  return { count: Number(total.n), results: found.map((r) => view(r, canonical)) };
}

/** Cancels a pending scrub; answers whether this call cancelled it, and the status it now has (undefined: no such scrub). */
export async function cancelPendingScrub(
  em: EntityManager,
  projectId: number,
  id: string,
): Promise<{ cancelled: boolean; status: ScrubStatus } | undefined> {
  const done = await db(em)
    .updateTable('event_scrub')
    .set({ status: 'cancelled', cancelled_at: sql<Date>`now()` })
    .where('id', '=', id)
    .where('project_id', '=', projectId)
    .where('status', '=', 'pending')
    .returning('status')
    .executeTakeFirst();
  if (done) return { cancelled: true, status: 'cancelled' };
  const row = await db(em)
    .selectFrom('event_scrub')
    .select('status')
    .where('id', '=', id)
    .where('project_id', '=', projectId)
    .forUpdate()
    .executeTakeFirst();
  return row ? { cancelled: false, status: row.status as ScrubStatus } : undefined;
}

/** The row a worker runs from. */
export interface ClaimedScrub {
  id: string;
  projectId: number;
  target: ScrubTarget;
  action: ScrubAction;
  filter: ScrubFilter;
  cutoff: string;
  countsBefore: Record<string, number> | null;
  previousStatus: ScrubStatus;
}

/**
 * Claims a due scrub (pending and its time come, or running with its lease run out) with a lease:
 * running, attempts counted. Undefined when it is not claimable (done, cancelled, held, or not due).
 */
export async function claimScrub(
  em: EntityManager,
  id: string,
  leaseSeconds: number,
): Promise<ClaimedScrub | undefined> {
  const before = await db(em)
    .selectFrom('event_scrub')
    .select('status')
    .where('id', '=', id)
    .forUpdate()
    .executeTakeFirst();
  if (!before) return undefined;
  const row = await db(em)
    .updateTable('event_scrub')
    .set((eb) => ({
      status: 'running',
      attempts: eb('attempts', '+', 1),
      lease_until: sql<Date>`now() + make_interval(secs => ${leaseSeconds})`,
      started_at: sql<Date>`coalesce(started_at, now())`,
    }))
    .where('id', '=', id)
    .where('run_after', '<=', sql<Date>`now()`)
    .where((eb) =>
      eb.or([
        eb('status', '=', 'pending'),
        eb.and([eb('status', '=', 'running'), eb('lease_until', '<', sql<Date>`now()`)]),
      ]),
    )
    .returning((eb) => [
      eb.cast<string>('id', 'text').as('id'),
      'project_id',
      'target',
      'action',
      'filter',
      sql<string>`to_char(cutoff at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`.as('cutoff'),
      'counts_before',
    ])
    .executeTakeFirst();
  if (!row) return undefined;
  return {
    id: row.id,
    projectId: row.project_id,
    target: row.target as ScrubTarget,
    action: row.action as ScrubAction,
    filter: row.filter as unknown as ScrubFilter,
    cutoff: row.cutoff,
    countsBefore: row.counts_before as Record<string, number> | null,
    previousStatus: before.status as ScrubStatus,
  };
}

export async function renewScrubLease(em: EntityManager, id: string, leaseSeconds: number): Promise<void> {
  await db(em)
    .updateTable('event_scrub')
    .set({ lease_until: sql<Date>`now() + make_interval(secs => ${leaseSeconds})` })
    .where('id', '=', id)
    .where('status', '=', 'running')
    .execute();
}

/** Keeps what a scrub found before its first statement (only its first attempt's). */
export async function recordCountsBefore(em: EntityManager, id: string, counts: Record<string, number>): Promise<void> {
  await db(em)
    .updateTable('event_scrub')
    .set({ counts_before: jsonb(counts) })
    .where('id', '=', id)
    .where('counts_before', 'is', null)
    .execute();
}

/** Adds a statement's rows to what the scrub changed in `store`. */
export async function addRowsChanged(em: EntityManager, id: string, store: string, n: number): Promise<void> {
  await db(em)
    .updateTable('event_scrub')
    .set({
      rows_changed: sql`jsonb_set(coalesce(rows_changed, '{}'::jsonb), ${sql.val([store])}::text[],
        to_jsonb(coalesce((rows_changed ->> ${store})::bigint, 0) + ${n}::bigint))`,
    })
    .where('id', '=', id)
    .execute();
}

/** The scrub is done: its counts after and its signed receipt, at the transaction's time. */
export async function completeScrub(
  em: EntityManager,
  id: string,
  done: { countsAfter: Record<string, number>; receipt: Record<string, unknown>; signature: string; keyId: string },
): Promise<void> {
  await db(em)
    .updateTable('event_scrub')
    .set({
      status: 'completed',
      completed_at: sql<Date>`now()`,
      lease_until: null,
      last_error: null,
      counts_after: jsonb(done.countsAfter),
      receipt: jsonb(done.receipt),
      receipt_signature: done.signature,
      receipt_key_id: done.keyId,
    })
    .where('id', '=', id)
    .execute();
}

/** An attempt failed: the lease goes (the next attempt claims it at once), the error is kept. */
export async function dropScrubLease(em: EntityManager, id: string, error: string): Promise<void> {
  await db(em)
    .updateTable('event_scrub')
    .set({ lease_until: null, last_error: error.slice(0, 2000) })
    .where('id', '=', id)
    .where('status', '=', 'running')
    .execute();
}

/** The job's attempts are spent: failed (a new scrub can be asked for). Whether this call failed it. */
export async function markScrubFailed(em: EntityManager, id: string, error: string): Promise<boolean> {
  const row = await db(em)
    .updateTable('event_scrub')
    .set({ status: 'failed', lease_until: null, last_error: error.slice(0, 2000) })
    .where('id', '=', id)
    .where('status', 'in', ['pending', 'running'])
    .returning('id')
    .executeTakeFirst();
  return row !== undefined;
}

/** Scrubs that should have a live job: pending and due, or running with their lease run out (a dead worker's). */
export async function dueScrubIds(em: EntityManager, among?: string[]): Promise<string[]> {
  let q = db(em)
    .selectFrom('event_scrub')
    .select((eb) => eb.cast<string>('id', 'text').as('id'))
    .where('run_after', '<=', sql<Date>`now()`)
    .where((eb) =>
      eb.or([
        eb('status', '=', 'pending'),
        eb.and([
          eb('status', '=', 'running'),
          eb.or([eb('lease_until', 'is', null), eb('lease_until', '<', sql<Date>`now()`)]),
        ]),
      ]),
    )
    .orderBy('id')
    .limit(1000);
  if (among) q = q.where('id', 'in', among.length ? among : ['0']);
  return (await q.execute()).map((r) => r.id);
}

export async function scrubProjectId(em: EntityManager, id: string): Promise<number | undefined> {
  const row = await db(em).selectFrom('event_scrub').select('project_id').where('id', '=', id).executeTakeFirst();
  return row?.project_id;
}

/** What the scrub's statements changed so far, per store. */
export async function scrubRowsChanged(em: EntityManager, id: string): Promise<Record<string, number>> {
  const row = await db(em).selectFrom('event_scrub').select('rows_changed').where('id', '=', id).executeTakeFirst();
  return (row?.rows_changed ?? {}) as Record<string, number>;
}

export async function scrubCountsBefore(em: EntityManager, id: string): Promise<Record<string, number> | null> {
  const row = await db(em).selectFrom('event_scrub').select('counts_before').where('id', '=', id).executeTakeFirst();
  return (row?.counts_before ?? null) as Record<string, number> | null;
}
