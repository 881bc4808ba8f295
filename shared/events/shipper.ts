// Ships new events from PostgreSQL (where capture writes) to the ClickHouse event store, in batches,
// idempotently, with the distinct-id → person mirror kept up to date first.
//
// Events are walked in (created_at, uuid) order from the shipped-up-to mark in `event_shipment`, only
// up to `settleSeconds` ago: capture stamps created_at before its transaction commits, so a row may
// become visible a little after later-stamped rows; waiting until a moment is settled means no row
// can still appear behind the mark (a capture transaction longer than that would be missed: keep it
// well above the longest one). A batch's end is committed first (pending), then the batch goes to
// ClickHouse with a dedup token made of its bounds, then the mark moves to its end: a crash anywhere
// re-sends exactly the same batch, which ClickHouse drops as a repeat. Nothing is lost or doubled
// (and were a row ever doubled, `events` is a ReplacingMergeTree and every read counts by uuid).
//
// Distinct ids: statement triggers on person_distinct_id write each changed distinct id to
// `person_distinct_id_change` (once a shipment exists). Each run takes the outbox rows, writes the
// current mapping of those distinct ids (or their deletion) to the mirror and deletes the rows: a
// change committed late is simply taken by the next run. The first run mirrors every project whole.
// Each mapping carries its person's created_at; a row trigger on person (migration 0064) writes a
// person's distinct ids to the outbox when a merge moves its creation.
// One shipper at a time (each step holds the shipment's row), so the mirror's versions only grow.
//
// A backfill of one project (`npm run manage -- events backfill --project N`, for an install switching
// to ClickHouse) is the same walk with a mark of its own (target `clickhouse:project:N`) over that
// project's rows; each of its steps also holds the main shipment's row, so it never runs beside the
// worker's shipper. The main shipper later sends those rows again: `events` folds them on merge and
// every read counts by uuid, so a project backfilled early costs only the second copy's bytes.
import type { EntityManager } from '@mikro-orm/postgresql';
import { sql } from 'kysely';
import { db } from '../platform/db/kysely.ts';
import { rows, run } from '../platform/db/sql.ts';
import type { ClickHouseEventRow, ClickHouseEventStore, DistinctIdMapping } from './clickhouse.ts';
import { mirroredCreatedAt, mirrorProjectDistinctIds } from './clickhouse-mirror.ts';

export const SHIPMENT_TARGET = 'clickhouse';
/** The position before every event (with created_at '-infinity'). */
export const ZERO_UUID = '00000000-0000-0000-0000-000000000000';

export interface ShipOptions {
  /** Events per ClickHouse insert. */
  batchSize: number;
  /** Events younger than this (by created_at) wait for the next run. */
  settleSeconds: number;
  /** Batches at most in one run (the rest is the next run's). */
  maxBatches?: number;
  /** Only this project's events, under a mark of its own (a backfill). */
  projectId?: number;
}

/** The mark a shipment keeps: the main one, or a project backfill's. */
export const shipmentTarget = (projectId?: number) =>
  projectId === undefined ? SHIPMENT_TARGET : `${SHIPMENT_TARGET}:project:${projectId}`;

export interface ShipResult {
  /** Another shipper held the lock: this run did nothing. */
  skipped: boolean;
  events: number;
  batches: number;
  distinctIds: number;
  /** Seconds since the oldest event not yet shipped arrived (0: none waiting). */
  lagSeconds: number;
}

export async function shipEvents(
  orm: { em: EntityManager },
  store: ClickHouseEventStore,
  options: ShipOptions,
): Promise<ShipResult> {
  const em = orm.em.fork();
  const result: ShipResult = { skipped: false, events: 0, batches: 0, distinctIds: 0, lagSeconds: 0 };
  const target = shipmentTarget(options.projectId);
  for (const t of new Set([SHIPMENT_TARGET, target]))
    await db(em)
      .insertInto('event_shipment')
      .values({ target: t, created_at: sql<Date>`'-infinity'`, uuid: ZERO_UUID })
      .onConflict((c) => c.doNothing())
      .execute();
  // Each step is a transaction holding the shipment's row: one shipper at a time, and its mark and
  // outbox deletions commit only after ClickHouse took the rows. A backfill holds the main row first.
  const locked = (step: (tx: EntityManager, mark: Mark) => Promise<void>) =>
    em.transactional(async (tx) => {
      if (target !== SHIPMENT_TARGET) {
        const main = await db(tx)
          .selectFrom('event_shipment')
          .select('target')
          .where('target', '=', SHIPMENT_TARGET)
          .forUpdate()
          .skipLocked()
          .executeTakeFirst();
        if (!main) return false;
      }
      // Timestamps as PostgreSQL's text: a mark keeps its microseconds (and '-infinity'), which a Date would not.
      const mark: Mark | undefined = await db(tx)
        .selectFrom('event_shipment')
        .select([
          sql<string>`created_at::text`.as('created_at'),
          'uuid',
          sql<string | null>`pending_created_at::text`.as('pending_created_at'),
          'pending_uuid',
          'distinct_ids_mirrored',
        ])
        .where('target', '=', target)
        .forUpdate()
        .skipLocked()
        .executeTakeFirst();
      if (!mark) return false;
      await step(tx, mark);
      return true;
    });
  const ran = await locked(async (tx, mark) => {
    if (mark.distinct_ids_mirrored) return;
    // The first run: the triggers record changes from the shipment's creation on; what existed
    // before is mirrored whole.
    const projects =
      options.projectId === undefined
        ? await db(tx).selectFrom('person_distinct_id').select('project_id as id').distinct().execute()
        : [{ id: options.projectId }];
    for (const p of projects) result.distinctIds += await mirrorProjectDistinctIds(tx, store, p.id);
    await db(tx)
      .updateTable('event_shipment')
      .set({ distinct_ids_mirrored: true })
      .where('target', '=', target)
      .execute();
  });
  if (!ran) return { ...result, skipped: true };
  // Persons first, so the events shipped next find their distinct ids mirrored.
  for (let more = true; more; )
    await locked(async (tx) => {
      const n = await shipDistinctIdChanges(tx, store, options.batchSize);
      result.distinctIds += n.mirrored;
      more = n.full;
    });
  for (let more = true; more && result.batches < (options.maxBatches ?? 100); ) {
    let batch: Batch | null = null;
    await locked(async (tx, mark) => {
      batch = await nextBatch(tx, target, mark, options);
    });
    if (batch === null) break;
    const { rows: values, end, token, resent } = batch as Batch;
    await store.insertRows(values, token);
    await locked(async (tx) => {
      await db(tx)
        .updateTable('event_shipment')
        .set({
          // The row matched pending_created_at and pending_uuid below, so neither is null here.
          created_at: sql<Date>`pending_created_at`,
          uuid: sql<string>`pending_uuid`,
          pending_created_at: null,
          pending_uuid: null,
          shipped: sql<string>`shipped + ${values.length}`,
          updated_at: sql<Date>`now()`,
        })
        .where('target', '=', target)
        .where('pending_created_at', '=', sql<Date>`${end.created_at}::timestamptz`)
        .where('pending_uuid', '=', end.uuid)
        .execute();
    });
    result.events += values.length;
    result.batches++;
    more = resent || values.length === options.batchSize;
  }
  result.lagSeconds = await shippingLag(em);
  return result;
}

export interface Mark {
  created_at: string;
  uuid: string;
  pending_created_at: string | null;
  pending_uuid: string | null;
  distinct_ids_mirrored: boolean;
}

/** Seconds since the oldest event past the mark arrived (0 when every event is shipped, or no shipment yet). */
export async function shippingLag(em: EntityManager): Promise<number> {
  const [row] = await em.transactional(async (tx) => {
    await indexOrdered(tx); // the first row past the mark, not every one sorted
    return rows<{ lag: number | null }>(
      tx,
      `select extract(epoch from clock_timestamp() - e.created_at)::float8 as lag
         from event_shipment s
         cross join lateral (select created_at from event e where (e.created_at, e.uuid) > (s.created_at, s.uuid)
                              order by e.created_at, e.uuid limit 1) e
        where s.target = ?`,
      [SHIPMENT_TARGET],
    );
  });
  return Math.max(0, row?.lag ?? 0);
}

/** One batch of the outbox: the current mapping of its distinct ids goes to the mirror. */
async function shipDistinctIdChanges(
  tx: EntityManager,
  store: ClickHouseEventStore,
  limit: number,
): Promise<{ mirrored: number; full: boolean }> {
  const changes = await db(tx)
    .selectFrom('person_distinct_id_change as c')
    .leftJoin('person_distinct_id as d', (join) =>
      join.onRef('d.project_id', '=', 'c.project_id').onRef('d.distinct_id', '=', 'c.distinct_id'),
    )
    .leftJoin('person as p', 'p.id', 'd.person_id')
    .select(['c.seq', 'c.project_id', 'c.distinct_id', 'd.person_id'])
    .select(sql<string | null>`${sql.raw(mirroredCreatedAt('p.created_at'))}`.as('created_at'))
    .orderBy('c.seq')
    .limit(limit)
    .execute();
  if (changes.length === 0) return { mirrored: 0, full: false };
  const latest = new Map<string, DistinctIdMapping>();
  for (const c of changes)
    latest.set(`${c.project_id}\u0000${c.distinct_id}`, {
      projectId: c.project_id,
      distinctId: c.distinct_id,
      personId: c.person_id,
      personCreatedAt: c.created_at,
    });
  await store.mirrorDistinctIds([...latest.values()]);
  await db(tx)
    .deleteFrom('person_distinct_id_change')
    .where('seq', '=', sql<string>`any(${changes.map((c) => c.seq)}::bigint[])`)
    .execute();
  return { mirrored: latest.size, full: changes.length === limit };
}

interface Batch {
  rows: ClickHouseEventRow[];
  end: { created_at: string; uuid: string };
  token: string;
  /** The pending batch of a run that died, sent again. */
  resent: boolean;
}

/**
 * The statement of the batch after the mark, in (created_at, uuid) order: the pending batch again, or
 * the next settled rows (at most batchSize). Run after indexOrdered() in its transaction.
 */
export function batchStatement(mark: Mark, options: ShipOptions): { sql: string; params: unknown[] } {
  const pending = mark.pending_created_at !== null && mark.pending_uuid !== null;
  // Timestamps as text with their microseconds (a JavaScript Date keeps milliseconds).
  return {
    sql: `select e.uuid::text as uuid, e.project_id, e.event, e.distinct_id, e.person_id::text as person_id,
            e.properties::text as properties,
            to_char(e.timestamp at time zone 'UTC', 'YYYY-MM-DD HH24:MI:SS.US') as timestamp,
            to_char(e.created_at at time zone 'UTC', 'YYYY-MM-DD HH24:MI:SS.US') as created_at,
            e.created_at::text as mark
       from event e
      where (e.created_at, e.uuid) > (?::timestamptz, ?::uuid) ${options.projectId === undefined ? '' : 'and e.project_id = ?'}
        and ${pending ? '(e.created_at, e.uuid) <= (?::timestamptz, ?::uuid)' : 'e.created_at < clock_timestamp() - make_interval(secs => ?)'}
      order by e.created_at, e.uuid limit ?`,
    params: [
      mark.created_at,
      mark.uuid,
      ...(options.projectId === undefined ? [] : [options.projectId]),
      ...(pending ? [mark.pending_created_at, mark.pending_uuid] : [options.settleSeconds]),
      options.batchSize,
    ],
  };
}

/**
 * Makes the transaction's walks past a mark read event_created_idx in order (a Merge Append of each
 * partition's index, stopping at the limit) instead of collecting and sorting every row past the
 * mark. The planner estimates `(created_at, uuid) > (mark)` by created_at alone: when many events
 * share the mark's created_at (a bulk import, a replayed batch) it expects about one row and sorts,
 * and each batch read everything not yet shipped (200k rows of one created_at: 1.1 s a batch instead
 * of 65 ms). With sorts disabled the index order is the only plan left; `set local` ends with the
 * transaction.
 */
export async function indexOrdered(tx: EntityManager): Promise<void> {
  await run(tx, `set local enable_sort = off`);
}

/**
 * The batch after the mark: the pending one if a run died while shipping it (the same rows again),
 * otherwise the next settled rows, whose end is recorded as pending before they are sent.
 */
async function nextBatch(tx: EntityManager, target: string, mark: Mark, options: ShipOptions): Promise<Batch | null> {
  const pending = mark.pending_created_at !== null && mark.pending_uuid !== null;
  const statement = batchStatement(mark, options);
  await indexOrdered(tx);
  const found = await rows<ClickHouseEventRow & { mark: string }>(tx, statement.sql, statement.params);
  if (found.length === 0) {
    if (pending)
      await run(tx, `update event_shipment set pending_created_at = null, pending_uuid = null where target = ?`, [
        target,
      ]);
    return null;
  }
  const first = found[0];
  const last = found[found.length - 1];
  const end = { created_at: last.mark, uuid: last.uuid };
  if (!pending)
    await run(
      tx,
      `update event_shipment set pending_created_at = ?::timestamptz, pending_uuid = ?::uuid where target = ?`,
      [end.created_at, end.uuid, target],
    );
  return {
    rows: found.map(({ mark: _mark, ...row }) => row),
    end,
    token: `ship:${first.mark}/${first.uuid}:${last.mark}/${last.uuid}:${found.length}`,
    resent: pending,
  };
}

/** Events past a shipment's mark: the main one, or a project backfill's (that project's events). */
export async function unshippedEvents(em: EntityManager, projectId?: number): Promise<number> {
  const target = shipmentTarget(projectId);
  const [row] = await rows<{ n: number }>(
    em,
    `select count(*)::float8 as n from event e
      where (e.created_at, e.uuid) > (coalesce((select created_at from event_shipment where target = ?), '-infinity'),
                                      coalesce((select uuid from event_shipment where target = ?), ?::uuid))
        ${projectId === undefined ? '' : 'and e.project_id = ?'}`,
    [target, target, ZERO_UUID, ...(projectId === undefined ? [] : [projectId])],
  );
  return Number(row.n);
}

export interface BackfillProgress {
  /** Events shipped by this backfill so far, and in how many batches. */
  events: number;
  batches: number;
  distinctIds: number;
  /** Events past the mark when the backfill started. */
  total: number;
  elapsedMs: number;
}

export interface BackfillOptions {
  batchSize: number;
  settleSeconds: number;
  /** One project's events under a mark of its own; all projects (the main shipment) if absent. */
  projectId?: number;
  /** After each run of a few batches. */
  onProgress?: (progress: BackfillProgress) => void;
  /** When the worker's shipper holds the mark: the backfill waits a second and tries again. */
  onBusy?: () => void;
}

/**
 * Copies the events already stored in PostgreSQL to ClickHouse, for an install switching to
 * EVENT_STORE=clickhouse: the shipper's own walk (its batches, dedup tokens and mark) run until it
 * reaches the settled end, so a backfill stopped anywhere resumes where its mark is, and one run again
 * sends nothing. Returns what it shipped, and how many events are left (too young to settle: the worker's
 * shipper, or the next backfill, takes them).
 */
export async function backfillEvents(
  orm: { em: EntityManager },
  store: ClickHouseEventStore,
  options: BackfillOptions,
): Promise<BackfillProgress & { left: number }> {
  const started = Date.now();
  const total = await unshippedEvents(orm.em.fork(), options.projectId);
  const progress: BackfillProgress = { events: 0, batches: 0, distinctIds: 0, total, elapsedMs: 0 };
  const maxBatches = 5;
  for (;;) {
    const run = await shipEvents(orm, store, { ...options, maxBatches });
    if (run.skipped) {
      options.onBusy?.();
      await new Promise((resolve) => setTimeout(resolve, 1000));
      continue;
    }
    progress.events += run.events;
    progress.batches += run.batches;
    progress.distinctIds += run.distinctIds;
    progress.elapsedMs = Date.now() - started;
    options.onProgress?.({ ...progress });
    // A run that stopped before its batch limit reached the settled end.
    if (run.batches < maxBatches) break;
  }
  return { ...progress, left: await unshippedEvents(orm.em.fork(), options.projectId) };
}

/**
 * Runs `step` holding the main shipment's row while no batch is in flight (none read from PostgreSQL and
 * not yet in ClickHouse): a batch the shipper read before a change to PostgreSQL's rows is in ClickHouse
 * by then, and none is read until `step` is done (the shipper skips a locked row), so a statement
 * `step` runs on ClickHouse covers every copy of the rows it changed. A batch stays in flight while its
 * shipper inserts it (waited for up to `waitMs`, then `step` runs anyway: a crashed shipper's batch is
 * read again from PostgreSQL when it is resent). Without a shipment yet, `step` just runs.
 */
export async function withShipmentsSettled<T>(
  orm: { em: EntityManager },
  step: () => Promise<T>,
  waitMs = 60_000,
): Promise<T> {
  const until = Date.now() + waitMs;
  for (;;) {
    const result = await orm.em.fork().transactional(async (tx) => {
      const [mark] = await rows<{ busy: boolean }>(
        tx,
        `select pending_created_at is not null as busy from event_shipment where target = ? for update`,
        [SHIPMENT_TARGET],
      );
      if (mark?.busy && Date.now() < until) return { ran: false as const };
      return { ran: true as const, value: await step() };
    });
    if (result.ran) return result.value;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}
