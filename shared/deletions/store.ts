// Deletion requests (async_deletion rows): every statement on the table lives here. The API records
// requests in the same transaction as the person change; the worker releases, claims, deletes,
// completes or fails them. A request's row is the source of truth; queue jobs carry only its id.
import { raw, type EntityManager } from '@mikro-orm/postgresql';
import { type Expression, type ExpressionBuilder, type Selection, sql } from 'kysely';
import { type DB, db } from '../platform/db/kysely.ts';
import { pagedSelect } from '../platform/db/paged.ts';
import { AsyncDeletion, type AsyncDeletionRow } from '../platform/entities/index.ts';
import { isoTimestamp } from '../platform/time.ts';
import type { DeletionMode, DeletionType } from './schedule.ts';
import type { EventStore } from '../events/index.ts';

/**
 * pending → running → completed (delete_verified_at set) | failed (tried again at next_attempt_at);
 * pending → cancelled (by a user, before any worker claimed it; final).
 */
export type DeletionStatus = 'pending' | 'running' | 'completed' | 'failed' | 'cancelled';
/** The statuses, in the order of the API's enum; the CLI, the operators' page and the metrics all say these. */
export const DELETION_STATUSES: readonly DeletionStatus[] = ['pending', 'running', 'completed', 'failed', 'cancelled'];

export interface DeletionRequest {
  projectId: number;
  type: DeletionType;
  mode: DeletionMode;
  /** The person's uuid. */
  key: string;
  /** The person's distinct ids when asked (recordings are found by them after the person is gone). */
  distinctIds: string[];
  createdById: number | null;
}

/**
 * Records the requests; returns the ids of the rows that now stand for them. A request joins a
 * *pending* row of the same person, type and mode (no worker has read it yet): the row's cutoff
 * moves to now and the distinct ids are united, so it covers both requests. Otherwise (nothing
 * pending, or only running, failed or completed rows) it gets a row of its own.
 */
export async function recordDeletionRequests(em: EntityManager, requests: DeletionRequest[]): Promise<string[]> {
  // One row per (type, key, mode) in a statement: ON CONFLICT cannot touch a row twice.
  const unique = new Map<string, DeletionRequest>();
  for (const r of requests) {
    const id = `${r.projectId} ${r.type} ${r.mode} ${r.key}`;
    const seen = unique.get(id);
    unique.set(id, seen ? { ...seen, distinctIds: [...new Set([...seen.distinctIds, ...r.distinctIds])] } : r);
  }
  if (unique.size === 0) return [];
  const payload = JSON.stringify(
    [...unique.values()].map((r) => ({
      project_id: r.projectId,
      deletion_type: r.type,
      mode: r.mode,
      key: r.key,
      distinct_ids: r.distinctIds,
      created_by_id: r.createdById,
    })),
  );
  const ids = await db(em)
    .insertInto('async_deletion')
    .columns(['project_id', 'deletion_type', 'mode', 'key', 'distinct_ids', 'created_by_id'])
    .expression((eb) =>
      eb
        .selectFrom(
          sql<{
            project_id: number;
            deletion_type: string;
            mode: string;
            key: string;
            distinct_ids: string[];
            created_by_id: number | null;
          }>`jsonb_to_recordset(${payload}::jsonb)`.as<'r'>(
            sql`r(project_id int, deletion_type text, mode text, key text, distinct_ids jsonb, created_by_id int)`,
          ),
        )
        .select([
          'r.project_id',
          'r.deletion_type',
          'r.mode',
          'r.key',
          sql<string[]>`array(select jsonb_array_elements_text(r.distinct_ids))`.as('distinct_ids'),
          'r.created_by_id',
        ]),
    )
    // The arbiter is the partial unique index of pending rows: its predicate said as a literal, as the index says it.
    .onConflict((oc) =>
      oc
        .columns(['project_id', 'deletion_type', 'key', 'mode'])
        .where('status', '=', sql.lit('pending'))
        .doUpdateSet((eb) => ({
          cutoff: eb.fn('greatest', ['async_deletion.cutoff', 'excluded.cutoff']),
          distinct_ids: sql<
            string[]
          >`array(select distinct unnest(coalesce(async_deletion.distinct_ids, '{}') || excluded.distinct_ids))`,
        })),
    )
    .returning((eb) => eb.cast<string>('id', 'text').as('id'))
    .execute();
  return ids.map((r) => r.id);
}

// ---- What the API and the CLI show -------------------------------------------------------------

export interface DeletionRequestView {
  id: string;
  project_id: number;
  person_uuid: string;
  deletion_type: string;
  mode: string;
  status: DeletionStatus;
  created_at: string | null;
  /** Only data that existed up to this moment is deleted (moves when a repeated request joins). */
  cutoff: string | null;
  /** Worker claims so far, counting BullMQ's quick retries. */
  attempts: number;
  /** Times the request failed finally; each is followed by an automatic retry at next_attempt_at. */
  failures: number;
  last_error: string | null;
  next_attempt_at: string | null;
  started_at: string | null;
  delete_verified_at: string | null;
  /** When it was cancelled (status cancelled), else null. */
  cancelled_at: string | null;
  /** suppress=true: 'active' while capture drops its distinct ids' events, 'lifted' after unsuppress; else null. */
  suppression: 'active' | 'lifted' | null;
  /** Events capture dropped because of its suppression. */
  suppressed_events: number;
}

type AsyncDeletionExpressions = ExpressionBuilder<DB, 'async_deletion'>;

// A bare `id` in an ORDER BY below is the selected `id::text` (a name there means the select list's
// column first), as in the statements these replaced: ids of one created_at are ordered as text.

/** The columns of a DeletionRequestView, read from async_deletion (a select, or an update's returning). */
const viewColumns = (eb: AsyncDeletionExpressions) =>
  [
    eb.cast<string>('async_deletion.id', 'text').as('id'),
    'async_deletion.project_id',
    'async_deletion.key',
    'async_deletion.deletion_type',
    'async_deletion.mode',
    'async_deletion.status',
    'async_deletion.created_at',
    'async_deletion.cutoff',
    'async_deletion.attempts',
    'async_deletion.failures',
    'async_deletion.last_error',
    'async_deletion.next_attempt_at',
    'async_deletion.started_at',
    'async_deletion.delete_verified_at',
    eb
      .case()
      .when('async_deletion.status', '=', 'cancelled')
      .then(eb.ref('async_deletion.finished_at'))
      .end()
      .as('cancelled_at'),
    // '<active|lifted>,<dropped>', or null without suppressions: one subquery for both.
    eb
      .selectFrom('deletion_suppression as s')
      .whereRef('s.request_id', '=', 'async_deletion.id')
      .select((s) =>
        sql<string | null>`${s
          .case()
          .when(s.fn.countAll(), '=', 0)
          .then(sql<string | null>`null`)
          .when(s.fn<boolean>('bool_or', [s('s.lifted_at', 'is', null)]))
          .then(sql.lit('active'))
          .else(sql.lit('lifted'))
          .end()} || ',' || ${s.fn.coalesce(s.fn.sum('s.dropped_count'), sql.lit(0))}`.as('suppression'),
      )
      .$castTo<string | null>()
      .as('suppression'),
  ] as const;

type ViewRow = Selection<DB, 'async_deletion', ReturnType<typeof viewColumns>[number]>;

/** The `suppression` column: '<active|lifted>,<dropped>' or null. */
function suppressionOf(column: string | null): Pick<DeletionRequestView, 'suppression' | 'suppressed_events'> {
  if (!column) return { suppression: null, suppressed_events: 0 };
  const [state, dropped] = column.split(',');
  return { suppression: state as 'active' | 'lifted', suppressed_events: Number(dropped) };
}

function view(row: ViewRow): DeletionRequestView {
  return {
    id: String(row.id),
    project_id: row.project_id,
    person_uuid: row.key,
    deletion_type: row.deletion_type,
    mode: row.mode,
    status: row.status as DeletionStatus,
    created_at: isoTimestamp(row.created_at),
    cutoff: isoTimestamp(row.cutoff),
    attempts: row.attempts,
    failures: row.failures,
    last_error: row.last_error,
    next_attempt_at: isoTimestamp(row.next_attempt_at),
    started_at: isoTimestamp(row.started_at),
    delete_verified_at: isoTimestamp(row.delete_verified_at),
    cancelled_at: isoTimestamp(row.cancelled_at),
    ...suppressionOf(row.suppression),
  };
}

export async function deletionRequestsByIds(em: EntityManager, ids: string[]): Promise<DeletionRequestView[]> {
  if (ids.length === 0) return [];
  const found = await db(em)
    .selectFrom('async_deletion')
    .select(viewColumns)
    .where((eb) => eb('async_deletion.id', '=', eb.fn.any(eb.val(ids))))
    .orderBy('id')
    .execute();
  return found.map(view);
}

export interface DeletionListFilter {
  /** null: every project (the CLI). */
  projectId: number | null;
  /** 'pending' includes running requests (not done yet); 'all' or null: every status. */
  status?: DeletionStatus | 'all' | null;
  personUuid?: string | null;
}

/** A page of requests, newest first, and how many match. */
export async function listDeletionRequests(
  em: EntityManager,
  filter: DeletionListFilter,
  page: { limit: number; offset: number },
): Promise<{ count: number; results: DeletionRequestView[] }> {
  let query = db(em).selectFrom('async_deletion').select(viewColumns);
  if (filter.projectId !== null) query = query.where('async_deletion.project_id', '=', filter.projectId);
  if (filter.status === 'pending') query = query.where('async_deletion.status', 'in', ['pending', 'running']);
  else if (filter.status && filter.status !== 'all') query = query.where('async_deletion.status', '=', filter.status);
  if (filter.personUuid) query = query.where('async_deletion.key', '=', filter.personUuid.toLowerCase());
  const found = await pagedSelect(em, query.orderBy('created_at', 'desc').orderBy('id', 'desc'), page);
  return { count: found.count, results: found.rows.map(view) };
}

/**
 * What the operators' page and `manage deletion list` list: the requests of one status (exactly that
 * status, unlike the API's `pending`, which includes running ones), those not done yet (`open`: pending,
 * running, failed) or every request (`all`).
 */
export const OPERATOR_DELETION_FILTERS = [
  'pending',
  'running',
  'completed',
  'failed',
  'cancelled',
  'open',
  'all',
] as const satisfies readonly (DeletionStatus | 'open' | 'all')[];
export type OperatorDeletionFilter = (typeof OPERATOR_DELETION_FILTERS)[number];

export interface OperatorDeletionView extends DeletionRequestView {
  /** When its window released it to the workers (null: not yet, or an immediate request). */
  released_at: string | null;
  /** The id of the key that signed its receipt (null: no receipt, e.g. not verified yet). */
  receipt_key_id: string | null;
}

/**
 * A page of requests for the operators (the page and the CLI), of one project or of all; `total` counts
 * them all. Not done yet (`open`: pending, running, failed) and each of those: failed first, then oldest
 * first; cancelled, completed and `all`: the most recently done (or made) first.
 */
export async function listOperatorDeletionRequests(
  em: EntityManager,
  filter: { projectId: number | null; status: OperatorDeletionFilter; limit: number },
): Promise<{ total: number; results: OperatorDeletionView[] }> {
  const open =
    filter.status === 'open' ||
    filter.status === 'pending' ||
    filter.status === 'running' ||
    filter.status === 'failed';
  const statuses: string[] =
    filter.status === 'open'
      ? ['pending', 'running', 'failed']
      : filter.status === 'all'
        ? [...DELETION_STATUSES]
        : [filter.status];
  let query = db(em)
    .selectFrom('async_deletion')
    .select(viewColumns)
    .select((eb) => [
      'async_deletion.released_at',
      eb
        .selectFrom('deletion_receipt as r')
        .select('r.key_id')
        .whereRef('r.request_id', '=', 'async_deletion.id')
        .as('receipt_key_id'),
    ])
    .where((eb) => eb('async_deletion.status', '=', eb.fn.any(eb.val(statuses))));
  // delete_verified_at is null: the partial index of the requests not done.
  if (open) query = query.where('async_deletion.delete_verified_at', 'is', null);
  if (filter.projectId !== null) query = query.where('async_deletion.project_id', '=', filter.projectId);
  const ordered = open
    ? query
        .orderBy((eb) => eb('async_deletion.status', '=', sql.lit('failed')), 'desc')
        .orderBy('created_at')
        .orderBy('id')
    : query
        .orderBy(
          (eb) =>
            eb.fn.coalesce(
              'async_deletion.delete_verified_at',
              'async_deletion.finished_at',
              'async_deletion.created_at',
            ),
          'desc',
        )
        .orderBy('id', 'desc');
  const found = await pagedSelect(em, ordered, { limit: filter.limit, offset: 0 });
  return {
    total: found.count,
    results: found.rows.map((row) => ({
      ...view(row),
      released_at: isoTimestamp(row.released_at),
      receipt_key_id: row.receipt_key_id ?? null,
    })),
  };
}

/** Requests by status, for the metrics. */
export async function deletionCountsByStatus(em: EntityManager): Promise<{ status: string; n: number }[]> {
  return db(em)
    .selectFrom('async_deletion')
    .select((eb) => ['status', eb.cast<number>(eb.fn.countAll(), 'integer').as('n')])
    .groupBy('status')
    .execute();
}

/** The request `id`, in project `projectId` (null: any project). */
const inProject = (eb: AsyncDeletionExpressions, projectId: number | null, id: string) =>
  projectId === null
    ? eb('async_deletion.id', '=', id)
    : eb.and([eb('async_deletion.id', '=', id), eb('async_deletion.project_id', '=', projectId)]);

/**
 * An operator's retry of a failed request: due at once. Answers the request, or why not
 * ('not_found' in that project, or 'not_failed').
 */
export async function retryFailedDeletion(
  em: EntityManager,
  projectId: number | null,
  id: string,
): Promise<DeletionRequestView | 'not_found' | 'not_failed'> {
  const updated = await db(em)
    .updateTable('async_deletion')
    .set({ next_attempt_at: sql`now()` })
    .where((eb) => inProject(eb, projectId, id))
    .where('async_deletion.status', '=', 'failed')
    .where('async_deletion.delete_verified_at', 'is', null)
    .returning(viewColumns)
    .executeTakeFirst();
  if (updated) return view(updated);
  const exists = await db(em)
    .selectFrom('async_deletion')
    .select(sql.lit(1).as('one'))
    .where((eb) => inProject(eb, projectId, id))
    .executeTakeFirst();
  return exists ? 'not_failed' : 'not_found';
}

/**
 * Cancels a pending request: one conditional UPDATE, so against a worker's claim (also conditional
 * on `pending`) exactly one of the two wins. Answers the cancelled row, or the row as it is now
 * (another status: the claim won, or it was cancelled before), or undefined (not in that project;
 * projectId null: any project).
 */
export async function cancelPendingDeletion(
  em: EntityManager,
  projectId: number | null,
  id: string,
): Promise<{ cancelled: boolean; request: DeletionRequestView } | undefined> {
  const updated = await db(em)
    .updateTable('async_deletion')
    .set({ status: 'cancelled', finished_at: sql`now()`, lease_until: null, next_attempt_at: null })
    .where((eb) => inProject(eb, projectId, id))
    .where('async_deletion.status', '=', 'pending')
    .returning(viewColumns)
    .executeTakeFirst();
  if (updated) return { cancelled: true, request: view(updated) };
  // A statement of its own: it sees a claim that committed while the update waited for the row.
  const current = await db(em)
    .selectFrom('async_deletion')
    .select(viewColumns)
    .where((eb) => inProject(eb, projectId, id))
    .executeTakeFirst();
  return current ? { cancelled: false, request: view(current) } : undefined;
}

// ---- The worker's side -------------------------------------------------------------------------

/** Hands a scheduled window's pending requests to the worker; `createdBefore` null: all of them. */
export async function releaseDeletions(
  em: EntityManager,
  mode: DeletionMode,
  createdBefore: Date | null,
): Promise<string[]> {
  let query = db(em)
    .updateTable('async_deletion')
    .set({ released_at: sql`now()` })
    .where('mode', '=', mode)
    .where('released_at', 'is', null)
    .where('status', '=', 'pending');
  if (createdBefore) query = query.where('created_at', '<', sql<Date>`${createdBefore.toISOString()}::timestamptz`);
  const released = await query.returning((eb) => eb.cast<string>('id', 'text').as('id')).execute();
  return released.map((r) => r.id);
}

/**
 * Left behind by a dead worker: running, its lease run out, and not in the batch of a lead that
 * still holds its lease (a lead renews its batch's leases together, but between two renewals a
 * companion's may lapse first).
 */
const orphaned = (eb: AsyncDeletionExpressions) =>
  eb.and([
    eb('async_deletion.status', '=', 'running'),
    eb('async_deletion.lease_until', '<', sql<Date>`now()`),
    eb.not(
      eb.exists(
        eb
          .selectFrom('async_deletion as lead')
          .select(sql.lit(1).as('one'))
          .whereRef('lead.id', '=', 'async_deletion.claimed_by')
          .whereRef('lead.id', '<>', 'async_deletion.id')
          .where('lead.status', '=', 'running')
          .where('lead.lease_until', '>=', sql<Date>`now()`),
      ),
    ),
  ]);
/** A request a worker may take: not done, and pending or orphaned. */
const claimable = (eb: AsyncDeletionExpressions) =>
  eb.and([
    eb('async_deletion.delete_verified_at', 'is', null),
    eb.or([eb('async_deletion.status', '=', 'pending'), orphaned(eb)]),
  ]);
/** A failed request not done: its job (a claim) is its retry. */
const failedNotDone = (eb: AsyncDeletionExpressions) =>
  eb.and([eb('async_deletion.status', '=', 'failed'), eb('async_deletion.delete_verified_at', 'is', null)]);
/** Released by its window, or immediate. */
const released = (eb: AsyncDeletionExpressions) =>
  eb.or([eb('async_deletion.mode', '=', 'immediate'), eb('async_deletion.released_at', 'is not', null)]);
/** `now() + leaseSeconds`, the end of a lease. */
const leaseEnd = (leaseSeconds: number) => sql<Date>`now() + make_interval(secs => ${leaseSeconds})`;

/**
 * Requests that should have a live job: released (or immediate) and claimable, or failed and due
 * for their retry. The reconciler makes sure each has one. A request in a live batch is not due: its
 * own job stepped aside, and running it again would only step aside again.
 */
export async function dueDeletionIds(
  em: EntityManager,
  among: string[] | null = null,
  limit = 10_000,
): Promise<string[]> {
  let query = db(em)
    .selectFrom('async_deletion')
    .select((eb) => eb.cast<string>('async_deletion.id', 'text').as('id'))
    .where((eb) =>
      eb.or([
        eb.and([released(eb), claimable(eb)]),
        eb.and([failedNotDone(eb), eb('async_deletion.next_attempt_at', '<=', sql<Date>`now()`)]),
      ]),
    );
  if (among) query = query.where((eb) => eb('async_deletion.id', '=', eb.fn.any(eb.val(among))));
  const due = await query.orderBy('id').limit(limit).execute();
  return due.map((r) => r.id);
}

/**
 * What a request's own job reads before anything else, by primary key, outside any transaction: its
 * status, who holds it, and whether a live batch holds it (running in another request's batch, not
 * orphaned). A job whose request is done or so held has nothing to do; a batch's companions are
 * mostly such jobs, so they cost one read. Undefined: no such request.
 */
export async function deletionState(
  em: EntityManager,
  id: string,
): Promise<{ status: DeletionStatus; claimedBy: string | null; inLiveBatch: boolean } | undefined> {
  const row = await db(em)
    .selectFrom('async_deletion')
    .select((eb) => [
      'async_deletion.status',
      eb.cast<string | null>('async_deletion.claimed_by', 'text').as('claimed_by'),
      eb
        .and([
          eb('async_deletion.status', '=', 'running'),
          eb('async_deletion.claimed_by', '<>', eb.ref('async_deletion.id')),
          eb.not(orphaned(eb)),
        ])
        .$castTo<boolean | null>()
        .as('in_live_batch'),
    ])
    .where('async_deletion.id', '=', id)
    .executeTakeFirst();
  if (!row) return undefined;
  return { status: row.status as DeletionStatus, claimedBy: row.claimed_by, inLiveBatch: row.in_live_batch === true };
}

export interface ClaimedDeletion {
  /** The request as it is after the claim, or, when not claimed, as it was before this statement. */
  request: AsyncDeletionRow;
  claimed: boolean;
  /** Its status before this statement: a claim of a pending or failed request starts it (deletion.running). */
  previousStatus: string;
}

/**
 * Claims the request for this job (a lease of `leaseSeconds`), or says why it cannot be claimed, in
 * one round trip (the select sees the row as it was before this statement, which is what the answer
 * needs when the update matched nothing). A failed request may be claimed: its job is its retry.
 */
export async function claimDeletion(
  em: EntityManager,
  id: string,
  leaseSeconds: number,
): Promise<ClaimedDeletion | undefined> {
  const result = await db(em)
    .with('previous', (q) =>
      q
        .selectFrom('async_deletion')
        .select(['id as previous_id', 'status as previous_status'])
        .where('id', '=', id)
        .forUpdate(),
    )
    .with('claimed', (q) =>
      q
        .updateTable('async_deletion')
        .from('previous')
        .set((eb) => ({
          status: 'running',
          started_at: eb.fn.coalesce('async_deletion.started_at', sql<Date>`now()`),
          attempts: eb('async_deletion.attempts', '+', 1),
          lease_until: leaseEnd(leaseSeconds),
          claimed_by: eb.ref('async_deletion.id'),
        }))
        .whereRef('async_deletion.id', '=', 'previous.previous_id')
        .where((eb) => eb.or([claimable(eb), failedNotDone(eb)]))
        .returningAll('async_deletion')
        .returning([sql<boolean>`true`.as('claimed'), 'previous.previous_status']),
    )
    .selectFrom('claimed')
    .selectAll()
    .unionAll((eb) =>
      eb
        .selectFrom('async_deletion')
        .selectAll()
        .select([sql<boolean>`false`.as('claimed'), 'async_deletion.status as previous_status'])
        .where('async_deletion.id', '=', id)
        .where(({ not, exists, selectFrom }) => not(exists(selectFrom('claimed').select(sql.lit(1).as('one'))))),
    )
    .executeTakeFirst();
  if (!result) return undefined;
  const { claimed, previous_status, ...row } = result;
  // The update matched nothing while the row still looked pending: a cancel (or another claim) that
  // committed while this statement waited for the row. A statement of its own sees what it is now.
  if (!claimed && row.status === 'pending') {
    const now = await db(em)
      .selectFrom('async_deletion')
      .select(['status', 'claimed_by'])
      .where('id', '=', id)
      .executeTakeFirst();
    Object.assign(row, now);
  }
  return { request: em.map(AsyncDeletion, row), claimed, previousStatus: previous_status };
}

/**
 * Other released event-deletion requests of the lead's project, claimed into its batch, with their
 * status before (pending, failed or running: see ClaimedDeletion).
 */
export async function claimCompanions(
  em: EntityManager,
  lead: AsyncDeletionRow,
  leaseSeconds: number,
  limit: number,
): Promise<{ id: string; previousStatus: string }[]> {
  if (limit <= 0) return [];
  const companions = db(em)
    .selectFrom('async_deletion')
    .select(['async_deletion.id as companion_id', 'async_deletion.status as previous_status'])
    .where('async_deletion.project_id', '=', lead.projectId)
    .where('async_deletion.deletion_type', '=', 'person_events')
    .where('async_deletion.id', '<>', lead.id)
    .where(released)
    .where((eb) =>
      eb.or([
        claimable(eb),
        // its own batch of an earlier attempt too, which no one else may take while it lives
        eb.and([
          eb('async_deletion.claimed_by', '=', lead.id),
          eb('async_deletion.status', '=', 'running'),
          eb('async_deletion.delete_verified_at', 'is', null),
        ]),
      ]),
    )
    .orderBy('async_deletion.id')
    .limit(limit)
    .forUpdate()
    .skipLocked()
    .as('companions');
  const claimed = await db(em)
    .updateTable('async_deletion')
    .from(companions)
    .set((eb) => ({
      status: 'running',
      started_at: eb.fn.coalesce('async_deletion.started_at', sql<Date>`now()`),
      attempts: eb('async_deletion.attempts', '+', 1),
      lease_until: leaseEnd(leaseSeconds),
      claimed_by: lead.id,
    }))
    .whereRef('async_deletion.id', '=', 'companions.companion_id')
    .returning((eb) => [eb.cast<string>('async_deletion.id', 'text').as('id'), 'companions.previous_status'])
    .execute();
  return claimed.map((r) => ({ id: r.id, previousStatus: r.previous_status }));
}

/**
 * What a batch of event-deletion requests covers, oldest cutoff first: plain rows, not entities (a
 * thousand entities cost ~30 ms to hydrate, and as much again to compare at every flush of the job's
 * EntityManager). The cutoff as PostgreSQL prints it, as the entity reads it (microseconds kept).
 */
export async function eventDeletionTargets(
  em: EntityManager,
  batch: string[],
): Promise<Pick<AsyncDeletionRow, 'id' | 'key' | 'distinctIds' | 'cutoff'>[]> {
  return db(em)
    .selectFrom('async_deletion')
    .select((eb) => [
      eb.cast<string>('id', 'text').as('id'),
      'key',
      'distinct_ids as distinctIds',
      eb.cast<string>('cutoff', 'text').as('cutoff'),
    ])
    .where((eb) => eb('id', '=', eb.fn.any(eb.val(batch))))
    .orderBy('async_deletion.cutoff')
    .orderBy('async_deletion.id')
    .execute();
}

export async function renewLeases(em: EntityManager, batch: string[], leaseSeconds: number): Promise<void> {
  await db(em)
    .updateTable('async_deletion')
    .set({ lease_until: leaseEnd(leaseSeconds) })
    .where((eb) => eb('id', '=', eb.fn.any(eb.val(batch))))
    .where('delete_verified_at', 'is', null)
    .execute();
}

/**
 * Companions a lead claimed but could not complete (each failed on its own after the batch failed),
 * handed back to their own jobs: its own again (claimed_by), lease gone, so its job may claim it at
 * once, and the lead's claim uncounted, so its attempts are its own job's (at most JOB_ATTEMPTS before
 * it fails) and a request that cannot be deleted is not counted once for every batch it was taken into.
 */
export async function handBackCompanions(em: EntityManager, leadId: string, ids: string[]): Promise<void> {
  await db(em)
    .updateTable('async_deletion')
    .set((eb) => ({
      claimed_by: eb.ref('async_deletion.id'),
      lease_until: sql`now()`,
      attempts: sql`greatest(async_deletion.attempts - 1, 0)`,
    }))
    .where((eb) => eb('id', '=', eb.fn.any(eb.val(ids))))
    .where('claimed_by', '=', leadId)
    .where('status', '=', 'running')
    .where('delete_verified_at', 'is', null)
    .execute();
}

/** Counts deleted rows on the request that did the work, in the delete's own transaction. */
export async function addRowsDeleted(em: EntityManager, id: string, n: number): Promise<void> {
  if (n > 0)
    await db(em)
      .updateTable('async_deletion')
      .set((eb) => ({ rows_deleted: eb('rows_deleted', '+', String(n)) }))
      .where('id', '=', id)
      .execute();
}

/** Verified: nothing the requests cover is left (at `verifiedAt`, by default now). */
export async function completeDeletions(em: EntityManager, batch: string[], verifiedAt?: string): Promise<void> {
  await db(em)
    .updateTable('async_deletion')
    .set({
      status: 'completed',
      // The time the receipts state (signDeletionReceipts took it after every count, before this).
      delete_verified_at: verifiedAt ? sql`${verifiedAt}::timestamptz` : sql`now()`,
      finished_at: sql`now()`,
      lease_until: null,
      last_error: null,
      next_attempt_at: null,
    })
    .where((eb) => eb('id', '=', eb.fn.any(eb.val(batch))))
    .execute();
}

/** After an error: the retry (or, for a batch, any worker) may claim the rows at once rather than after the lease. */
export async function dropLeases(em: EntityManager, batch: string[]): Promise<void> {
  await db(em)
    .updateTable('async_deletion')
    .set({ lease_until: sql`now()` })
    .where((eb) => eb('id', '=', eb.fn.any(eb.val(batch))))
    .where('delete_verified_at', 'is', null)
    .execute();
}

/**
 * After the job's last quick retry: failed, with the reason, and due again after a delay that
 * doubles with every failure up to `maxDelaySeconds`. There is no final give-up. False: already completed.
 */
export async function markDeletionFailed(
  em: EntityManager,
  id: string,
  reason: string,
  delays: { retryFirstDelaySeconds: number; retryMaxDelaySeconds: number },
): Promise<boolean> {
  const changed = await em.nativeUpdate(
    AsyncDeletion,
    { id, deleteVerifiedAt: null, status: { $ne: 'cancelled' } },
    {
      status: 'failed',
      lastError: reason.slice(0, 2000),
      leaseUntil: null,
      failures: raw('failures + 1'),
      nextAttemptAt: raw('now() + make_interval(secs => least(?::float8, ?::float8 * power(2, least(failures, 40))))', [
        delays.retryMaxDelaySeconds,
        delays.retryFirstDelaySeconds,
      ]),
    },
  );
  return changed > 0;
}

// ---- What an operator pages on -------------------------------------------------------------------

export interface DeletionAges {
  /** Seconds since the oldest request not yet done (pending, running or failed) was made; null: none. */
  oldestOpenSeconds: number | null;
  /**
   * Seconds the longest-waiting due request has been due (see dueDeletionIds): since it was made
   * (immediate), released (scheduled), its retry time came (failed) or its lease ran out (orphaned).
   * A scheduled request waiting for its window is not due, so this stays low while all is well.
   */
  oldestDueSeconds: number | null;
}

export async function deletionAges(em: EntityManager): Promise<DeletionAges> {
  const secondsSince = (instant: Expression<Date | null>) =>
    sql<number | null>`extract(epoch from now() - ${instant})::float8`;
  const ages = await db(em)
    .selectFrom('async_deletion')
    .select((eb) => [
      secondsSince(
        eb.fn
          .min('async_deletion.created_at')
          .filterWhere('async_deletion.status', 'in', ['pending', 'running', 'failed']),
      ).as('open'),
      secondsSince(
        eb.fn
          .min(
            eb
              .case()
              .when('async_deletion.status', '=', 'failed')
              .then(eb.ref('async_deletion.next_attempt_at'))
              .when('async_deletion.status', '=', 'running')
              .then(eb.ref('async_deletion.lease_until'))
              .when('async_deletion.mode', '=', 'immediate')
              .then(eb.ref('async_deletion.created_at'))
              .else(eb.ref('async_deletion.released_at'))
              .end(),
          )
          .filterWhere((f) =>
            f.or([
              f.and([released(f), claimable(f)]),
              f.and([
                f('async_deletion.status', '=', 'failed'),
                f('async_deletion.next_attempt_at', '<=', sql<Date>`now()`),
              ]),
            ]),
          ),
      ).as('due'),
    ])
    .where('async_deletion.delete_verified_at', 'is', null)
    .executeTakeFirstOrThrow();
  const seconds = (value: number | null) => (value === null ? null : Number(value));
  return { oldestOpenSeconds: seconds(ages.open), oldestDueSeconds: seconds(ages.due) };
}

// ---- Idempotency keys (deletion_idempotency_key) --------------------------------------------------

export interface StoredAnswer {
  status: number;
  body: unknown;
}

/**
 * Takes the user's key in the project for this request in the caller's transaction, kept `hours`: null
 * when it is taken now (new, or its earlier use expired), else the earlier use's fingerprint and
 * answer. A concurrent use of the key waits here until the first transaction ends, then sees its answer.
 */
export async function takeIdempotencyKey(
  em: EntityManager,
  projectId: number,
  { userId, key, fingerprint }: { userId: number; key: string; fingerprint: string },
  hours: number,
): Promise<(StoredAnswer & { fingerprint: string }) | null> {
  const taken = await db(em)
    .insertInto('deletion_idempotency_key')
    .values({
      project_id: projectId,
      user_id: userId,
      key,
      fingerprint,
      expires_at: sql<Date>`now() + make_interval(hours => ${hours})`,
    })
    .onConflict((oc) =>
      oc
        .columns(['project_id', 'user_id', 'key'])
        .doUpdateSet((eb) => ({
          fingerprint: eb.ref('excluded.fingerprint'),
          response_status: null,
          response_body: null,
          created_at: sql<Date>`now()`,
          expires_at: eb.ref('excluded.expires_at'),
        }))
        .where('deletion_idempotency_key.expires_at', '<=', sql<Date>`now()`),
    )
    .returning(sql.lit(1).as('one'))
    .executeTakeFirst();
  if (taken) return null;
  const earlier = await db(em)
    .selectFrom('deletion_idempotency_key')
    .select(['fingerprint', 'response_status', 'response_body'])
    .where('project_id', '=', projectId)
    .where('user_id', '=', userId)
    .where('key', '=', key)
    .executeTakeFirstOrThrow();
  // The transaction that took the key answered before it committed: its status is set.
  return { fingerprint: earlier.fingerprint, status: earlier.response_status as number, body: earlier.response_body };
}

/** The answer to the request that took the key, in its transaction. */
export async function storeIdempotentAnswer(
  em: EntityManager,
  projectId: number,
  { userId, key }: { userId: number; key: string },
  answer: StoredAnswer,
): Promise<void> {
  const body = answer.body === null || answer.body === undefined ? null : JSON.stringify(answer.body);
  await db(em)
    .updateTable('deletion_idempotency_key')
    .set({ response_status: answer.status, response_body: sql`${body}::jsonb` })
    .where('project_id', '=', projectId)
    .where('user_id', '=', userId)
    .where('key', '=', key)
    .execute();
}

/** Deletes the expired keys; returns how many. */
export async function purgeExpiredIdempotencyKeys(em: EntityManager): Promise<number> {
  const deleted = await db(em)
    .deleteFrom('deletion_idempotency_key')
    .where('expires_at', '<=', sql<Date>`now()`)
    .executeTakeFirst();
  return Number(deleted.numDeletedRows);
}

// ---- Dry runs: what a request would delete now ----------------------------------------------------

// The events a request covers are counted by the event store with its deletion's own predicate, so a
// dry run counts exactly what the deletion deletes.

/** The events and recordings (sessions) of these persons and distinct ids that exist now. */
export async function countPersonData(
  em: EntityManager,
  eventStore: EventStore,
  projectId: number,
  target: { personIds: string[]; distinctIds: string[] },
  what: { events: boolean; recordings: boolean },
): Promise<{ events: number; recordings: number }> {
  const { now } = await db(em)
    .selectNoFrom((eb) => eb.cast<string>(sql`now()`, 'text').as('now'))
    .executeTakeFirstOrThrow();
  const events = what.events
    ? (await eventStore.personEventCounts(projectId, { ...target, cutoff: now })).reduce((n, c) => n + c.n, 0)
    : 0;
  const recordings = what.recordings
    ? (
        await db(em)
          .selectFrom('session_recording')
          .select((eb) => eb.cast<number>(eb.fn.countAll(), 'integer').as('n'))
          .where('project_id', '=', projectId)
          .where((eb) =>
            eb.or([
              eb('person_id', '=', eb.fn.any(eb.val(target.personIds))),
              eb('distinct_id', '=', eb.fn.any(eb.val(target.distinctIds))),
            ]),
          )
          .where('created_at', '<=', sql<Date>`${now}::timestamptz`)
          .executeTakeFirstOrThrow()
      ).n
    : 0;
  return { events, recordings };
}
