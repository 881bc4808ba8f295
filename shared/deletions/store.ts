// Deletion requests (async_deletion rows): every statement on the table lives here. The API records
// requests in the same transaction as the person change; the worker releases, claims, deletes,
// completes or fails them. A request's row is the source of truth; queue jobs carry only its id.
import { raw, type EntityManager } from '@mikro-orm/postgresql';
import { pgArray, rows, run } from '../db/sql.ts';
import { AsyncDeletion, type AsyncDeletionRow } from '../entities/index.ts';
import { isoTimestamp } from '../time.ts';
import type { DeletionMode, DeletionType } from './schedule.ts';
import type { EventStore } from '../events/event-store.ts';

/**
 * pending → running → completed (delete_verified_at set) | failed (tried again at next_attempt_at);
 * pending → cancelled (by a user, before any worker claimed it; final).
 */
export type DeletionStatus = 'pending' | 'running' | 'completed' | 'failed' | 'cancelled';

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
  const ids = await rows<{ id: string }>(
    em,
    `insert into async_deletion as a (project_id, deletion_type, mode, key, distinct_ids, created_by_id)
     select r.project_id, r.deletion_type, r.mode, r.key, array(select jsonb_array_elements_text(r.distinct_ids)), r.created_by_id
       from jsonb_to_recordset(?::jsonb)
         as r(project_id int, deletion_type text, mode text, key text, distinct_ids jsonb, created_by_id int)
     on conflict (project_id, deletion_type, key, mode) where status = 'pending' do update
       set cutoff = greatest(a.cutoff, excluded.cutoff),
           distinct_ids = array(select distinct unnest(coalesce(a.distinct_ids, '{}') || excluded.distinct_ids))
     returning id::text`,
    [payload],
  );
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

const VIEW_COLUMNS = `id::text, project_id, key, deletion_type, mode, status, created_at, cutoff, attempts, failures,
  last_error, next_attempt_at, started_at, delete_verified_at,
  case when status = 'cancelled' then finished_at end as cancelled_at,
  (select case when count(*) = 0 then null when bool_or(s.lifted_at is null) then 'active' else 'lifted' end
          || ',' || coalesce(sum(s.dropped_count), 0)
     from deletion_suppression s where s.request_id = async_deletion.id) as suppression`;

/** The `suppression` column: '<active|lifted>,<dropped>' or null. */
function suppressionOf(column: string | null): Pick<DeletionRequestView, 'suppression' | 'suppressed_events'> {
  if (!column) return { suppression: null, suppressed_events: 0 };
  const [state, dropped] = column.split(',');
  return { suppression: state as 'active' | 'lifted', suppressed_events: Number(dropped) };
}

function view(row: any): DeletionRequestView {
  return {
    id: String(row.id),
    project_id: row.project_id,
    person_uuid: row.key,
    deletion_type: row.deletion_type,
    mode: row.mode,
    status: row.status,
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
  return (
    await rows(em, `select ${VIEW_COLUMNS} from async_deletion where id = any(?::bigint[]) order by id`, [pgArray(ids)])
  ).map(view);
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
  const where = ['true'];
  const params: unknown[] = [];
  if (filter.projectId !== null) {
    where.push('project_id = ?');
    params.push(filter.projectId);
  }
  if (filter.status === 'pending') where.push(`status in ('pending', 'running')`);
  else if (filter.status && filter.status !== 'all') {
    where.push('status = ?');
    params.push(filter.status);
  }
  if (filter.personUuid) {
    where.push('key = ?');
    params.push(filter.personUuid.toLowerCase());
  }
  const [{ count }] = await rows<{ count: number }>(
    em,
    `select count(*)::int as count from async_deletion where ${where.join(' and ')}`,
    params,
  );
  const found = await rows(
    em,
    `select ${VIEW_COLUMNS} from async_deletion where ${where.join(' and ')} order by created_at desc, id desc limit ? offset ?`,
    [...params, page.limit, page.offset],
  );
  return { count, results: found.map(view) };
}

/** What the operators' page lists: the requests not done yet (`open`), or those of one status. */
export const OPERATOR_DELETION_FILTERS = ['open', 'pending', 'running', 'failed', 'cancelled', 'completed'] as const;
export type OperatorDeletionFilter = (typeof OPERATOR_DELETION_FILTERS)[number];

export interface OperatorDeletionView extends DeletionRequestView {
  /** When its window released it to the workers (null: not yet, or an immediate request). */
  released_at: string | null;
  /** The id of the key that signed its receipt (null: no receipt, e.g. not verified yet). */
  receipt_key_id: string | null;
}

/**
 * A page of requests for the operators' page, of one project or of all; `total` counts them all. Not
 * done yet (`open`, the default: pending, running, failed) and each of those: failed first, then oldest
 * first; cancelled and completed: newest first.
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
  // delete_verified_at is null: the partial index of the requests not done.
  const where = `${open ? 'delete_verified_at is null and ' : ''}status = any(?::text[]) and (?::int is null or project_id = ?)`;
  const statuses = filter.status === 'open' ? ['pending', 'running', 'failed'] : [filter.status];
  const params = [pgArray(statuses), filter.projectId, filter.projectId];
  const [{ total }] = await rows<{ total: number }>(
    em,
    `select count(*)::int as total from async_deletion where ${where}`,
    params,
  );
  const order = open
    ? `status = 'failed' desc, created_at, id`
    : `coalesce(delete_verified_at, finished_at, created_at) desc, id desc`;
  const found = await rows<Record<string, unknown>>(
    em,
    `select ${VIEW_COLUMNS}, released_at,
            (select r.key_id from deletion_receipt r where r.request_id = async_deletion.id) as receipt_key_id
       from async_deletion where ${where} order by ${order} limit ?`,
    [...params, filter.limit],
  );
  return {
    total,
    results: found.map((row) => ({
      ...view(row),
      released_at: isoTimestamp(row.released_at as Date | string | null),
      receipt_key_id: (row.receipt_key_id as string | null) ?? null,
    })),
  };
}

/** Requests by status, for the metrics. */
export async function deletionCountsByStatus(em: EntityManager): Promise<{ status: string; n: number }[]> {
  return rows(em, `select status, count(*)::int as n from async_deletion group by status`);
}

/**
 * An operator's retry of a failed request: due at once. Answers the request, or why not
 * ('not_found' in that project, or 'not_failed').
 */
export async function retryFailedDeletion(
  em: EntityManager,
  projectId: number | null,
  id: string,
): Promise<DeletionRequestView | 'not_found' | 'not_failed'> {
  const [updated] = await rows(
    em,
    `update async_deletion set next_attempt_at = now()
      where id = ? and (?::int is null or project_id = ?) and status = 'failed' and delete_verified_at is null
      returning ${VIEW_COLUMNS}`,
    [id, projectId, projectId],
  );
  if (updated) return view(updated);
  const [exists] = await rows(em, `select 1 from async_deletion where id = ? and (?::int is null or project_id = ?)`, [
    id,
    projectId,
    projectId,
  ]);
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
  const inProject = `id = ? and (?::int is null or project_id = ?)`;
  const [updated] = await rows(
    em,
    `update async_deletion set status = 'cancelled', finished_at = now(), lease_until = null, next_attempt_at = null
      where ${inProject} and status = 'pending'
      returning ${VIEW_COLUMNS}`,
    [id, projectId, projectId],
  );
  if (updated) return { cancelled: true, request: view(updated) };
  // A statement of its own: it sees a claim that committed while the update waited for the row.
  const [current] = await rows(em, `select ${VIEW_COLUMNS} from async_deletion where ${inProject}`, [
    id,
    projectId,
    projectId,
  ]);
  return current ? { cancelled: false, request: view(current) } : undefined;
}

// ---- The worker's side -------------------------------------------------------------------------

/** Hands a scheduled window's pending requests to the worker; `createdBefore` null: all of them. */
export async function releaseDeletions(
  em: EntityManager,
  mode: DeletionMode,
  createdBefore: Date | null,
): Promise<string[]> {
  const released = await rows<{ id: string }>(
    em,
    `update async_deletion set released_at = now()
      where mode = ? and released_at is null and status = 'pending' and (?::timestamptz is null or created_at < ?::timestamptz)
      returning id::text`,
    [mode, createdBefore?.toISOString() ?? null, createdBefore?.toISOString() ?? null],
  );
  return released.map((r) => r.id);
}

/**
 * Left behind by a dead worker: running, its lease run out, and not in the batch of a lead that
 * still holds its lease (a lead renews its batch's leases together, but between two renewals a
 * companion's may lapse first).
 */
const ORPHANED = `(status = 'running' and lease_until < now()
  and not exists (select 1 from async_deletion lead
                   where lead.id = async_deletion.claimed_by and lead.id <> async_deletion.id
                     and lead.status = 'running' and lead.lease_until >= now()))`;
/** A request a worker may take: not done, and pending or orphaned. */
const CLAIMABLE = `delete_verified_at is null and (status = 'pending' or ${ORPHANED})`;

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
  const due = await rows<{ id: string }>(
    em,
    `select id::text from async_deletion
      where (((mode = 'immediate' or released_at is not null) and ${CLAIMABLE})
             or (status = 'failed' and delete_verified_at is null and next_attempt_at <= now()))
        and (?::bigint[] is null or id = any(?::bigint[]))
      order by id limit ?`,
    [among && pgArray(among), among && pgArray(among), limit],
  );
  return due.map((r) => r.id);
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
  const [result] = await rows<Record<string, unknown> & { claimed: boolean; previous_status: string }>(
    em,
    `with previous as (select id as previous_id, status as previous_status from async_deletion where id = ? for update),
     claimed as (
       update async_deletion set status = 'running', started_at = coalesce(started_at, now()), attempts = attempts + 1,
              lease_until = now() + make_interval(secs => ?), claimed_by = id
         from previous
        where id = previous_id and (${CLAIMABLE} or (status = 'failed' and delete_verified_at is null))
        returning async_deletion.*, true as claimed, previous_status)
     select * from claimed
     union all
     select *, false, status from async_deletion where id = ? and not exists (select 1 from claimed)`,
    [id, leaseSeconds, id],
  );
  if (!result) return undefined;
  const { claimed, previous_status, ...row } = result;
  // The update matched nothing while the row still looked pending: a cancel (or another claim) that
  // committed while this statement waited for the row. A statement of its own sees what it is now.
  if (!claimed && row.status === 'pending') {
    const [now] = await rows<{ status: string; claimed_by: unknown }>(
      em,
      `select status, claimed_by from async_deletion where id = ?`,
      [id],
    );
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
  const claimed = await rows<{ id: string; previous_status: string }>(
    em,
    `update async_deletion set status = 'running', started_at = coalesce(started_at, now()), attempts = attempts + 1,
            lease_until = now() + make_interval(secs => ?), claimed_by = ?
       from (select id as companion_id, status as previous_status from async_deletion
              where project_id = ? and deletion_type = 'person_events' and id <> ?
                and (mode = 'immediate' or released_at is not null)
                -- its own batch of an earlier attempt too, which no one else may take while it lives
                and (${CLAIMABLE} or (claimed_by = ? and status = 'running' and delete_verified_at is null))
              order by id limit ? for update skip locked) companions
      where id = companion_id
      returning id::text, previous_status`,
    [leaseSeconds, lead.id, lead.projectId, lead.id, lead.id, limit],
  );
  return claimed.map((r) => ({ id: r.id, previousStatus: r.previous_status }));
}

/** What a batch of event-deletion requests covers, oldest cutoff first. */
export async function eventDeletionTargets(
  em: EntityManager,
  batch: string[],
): Promise<Pick<AsyncDeletionRow, 'id' | 'key' | 'distinctIds' | 'cutoff'>[]> {
  return em.find(
    AsyncDeletion,
    { id: { $in: batch } },
    { fields: ['id', 'key', 'distinctIds', 'cutoff'], orderBy: { cutoff: 'asc', id: 'asc' } },
  );
}

export async function renewLeases(em: EntityManager, batch: string[], leaseSeconds: number): Promise<void> {
  await run(
    em,
    `update async_deletion set lease_until = now() + make_interval(secs => ?) where id = any(?::bigint[]) and delete_verified_at is null`,
    [leaseSeconds, pgArray(batch)],
  );
}

/** Counts deleted rows on the request that did the work, in the delete's own transaction. */
export async function addRowsDeleted(em: EntityManager, id: string, n: number): Promise<void> {
  if (n > 0) await run(em, `update async_deletion set rows_deleted = rows_deleted + ? where id = ?`, [n, id]);
}

/** Verified: nothing the requests cover is left. */
export async function completeDeletions(em: EntityManager, batch: string[]): Promise<void> {
  await em.nativeUpdate(
    AsyncDeletion,
    { id: { $in: batch } },
    {
      status: 'completed',
      deleteVerifiedAt: raw('now()'),
      finishedAt: raw('now()'),
      leaseUntil: null,
      lastError: null,
      nextAttemptAt: null,
    },
  );
}

/** After an error: the retry (or, for a batch, any worker) may claim the rows at once rather than after the lease. */
export async function dropLeases(em: EntityManager, batch: string[]): Promise<void> {
  await run(
    em,
    `update async_deletion set lease_until = now() where id = any(?::bigint[]) and delete_verified_at is null`,
    [pgArray(batch)],
  );
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
  const [ages] = await rows<{ open: number | null; due: number | null }>(
    em,
    `select extract(epoch from now() - min(created_at)
                    filter (where status in ('pending', 'running', 'failed')))::float8 as open,
            extract(epoch from now() - min(case when status = 'failed' then next_attempt_at
                                                when status = 'running' then lease_until
                                                when mode = 'immediate' then created_at
                                                else released_at end)
                    filter (where ((mode = 'immediate' or released_at is not null) and ${CLAIMABLE})
                               or (status = 'failed' and next_attempt_at <= now())))::float8 as due
       from async_deletion where delete_verified_at is null`,
  );
  const seconds = (value: number | null) => (value === null ? null : Number(value));
  return { oldestOpenSeconds: seconds(ages.open), oldestDueSeconds: seconds(ages.due) };
}

// ---- Idempotency keys (deletion_idempotency_key) --------------------------------------------------

export interface StoredAnswer {
  status: number;
  body: unknown;
}

/**
 * Takes the project's key for this request in the caller's transaction, kept `hours`: null when it is
 * taken now (new, or its earlier use expired), else the earlier use's fingerprint and answer. A
 * concurrent use of the key waits here until the first transaction ends, then sees its answer.
 */
export async function takeIdempotencyKey(
  em: EntityManager,
  projectId: number,
  key: string,
  fingerprint: string,
  hours: number,
): Promise<(StoredAnswer & { fingerprint: string }) | null> {
  const [taken] = await rows(
    em,
    `insert into deletion_idempotency_key as k (project_id, key, fingerprint, expires_at)
     values (?, ?, ?, now() + make_interval(hours => ?))
     on conflict (project_id, key) do update
       set fingerprint = excluded.fingerprint, response_status = null, response_body = null, created_at = now(),
           expires_at = excluded.expires_at
       where k.expires_at <= now()
     returning 1`,
    [projectId, key, fingerprint, hours],
  );
  if (taken) return null;
  const [earlier] = await rows<{ fingerprint: string; response_status: number; response_body: unknown }>(
    em,
    `select fingerprint, response_status, response_body from deletion_idempotency_key where project_id = ? and key = ?`,
    [projectId, key],
  );
  return { fingerprint: earlier.fingerprint, status: earlier.response_status, body: earlier.response_body };
}

/** The answer to the request that took the key, in its transaction. */
export async function storeIdempotentAnswer(
  em: EntityManager,
  projectId: number,
  key: string,
  answer: StoredAnswer,
): Promise<void> {
  await run(
    em,
    `update deletion_idempotency_key set response_status = ?, response_body = ?::jsonb where project_id = ? and key = ?`,
    [
      answer.status,
      answer.body === null || answer.body === undefined ? null : JSON.stringify(answer.body),
      projectId,
      key,
    ],
  );
}

/** Deletes the expired keys; returns how many. */
export async function purgeExpiredIdempotencyKeys(em: EntityManager): Promise<number> {
  return run(em, `delete from deletion_idempotency_key where expires_at <= now()`);
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
  const [{ now }] = await rows<{ now: string }>(em, `select now()::text as now`);
  const count = async (sql: string, params: unknown[]) => (await rows<{ n: number }>(em, sql, params))[0].n;
  const events = what.events
    ? (await eventStore.personEventCounts(projectId, { ...target, cutoff: now })).reduce((n, c) => n + c.n, 0)
    : 0;
  const recordings = what.recordings
    ? await count(
        `select count(*)::int as n from session_recording
          where project_id = ? and (person_id = any(?::uuid[]) or distinct_id = any(?::text[])) and created_at <= ?::timestamptz`,
        [projectId, pgArray(target.personIds), pgArray(target.distinctIds), now],
      )
    : 0;
  return { events, recordings };
}
