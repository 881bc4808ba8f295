// Analytics reads: every statement that computes person analytics from events (funnel steps, funnel
// correlation, lifecycle buckets, the properties timeline's events, a person's cohorts) lives here.
// This is the seam for a columnar event store: the API calls only these typed functions, which answer
// with person ids (a count and a page) or events, so another engine can take them over one by one
// while persons stay in PostgreSQL. A person's events are found through its current distinct ids, so
// merged persons count once with all their events.
import type { FunnelParams, Page, PersonIdPage, LifecycleParams, TimelineEvent } from './event-store.ts';
import type { EntityManager } from '@mikro-orm/postgresql';
import {
  type ExperimentEventFilter,
  type ExperimentEvents,
  type ExperimentProperty,
  experimentNames,
  noEventColumns,
} from './event-store.ts';
import { EXPERIMENT_READ_PART, inTurn, partBounds, partRange, partsFor } from './parts.ts';
import type { SqlFragment } from '../platform/db/property-filters.ts';
import { sql } from 'kysely';
import { db } from '../platform/db/kysely.ts';
import { pgArray, rows, run } from '../platform/db/sql.ts';

/**
 * Each person's funnel level (the furthest step reached) from one scan of the step events in the
 * range, as PostHog counts it: every step-1 event starts an attempt, and an attempt reaches step k
 * when steps 2..k follow in order within the conversion window of its start. Per person, in time
 * order, l_k is the latest start of an attempt that reached step k before the current event (the
 * latest start is the one with the most window left), so each level is one window pass. One event
 * advances an attempt by one step at most: l_k comes from the events strictly before it. Events of
 * equal time are ordered by step, so a step may follow the one before it at the same instant.
 * `extra`: an event name whose occurrence in the range each row also reports (correlation).
 * Columns: person_id, level (0 when only `extra` was seen), extra.
 */
function funnelLevelsSql(projectId: number, params: FunnelParams, extra: string | null = null): SqlFragment {
  const { steps } = params;
  const n = steps.length;
  const names = [...new Set([...steps, ...(extra === null ? [] : [extra])])];
  const values: unknown[] = [];
  const matches = steps.map((event, i) => {
    values.push(event);
    return `e.event = ? as m${i + 1}`;
  });
  values.push(...steps);
  const ord = `case e.event ${steps.map((_, i) => `when ? then ${i + 1}`).join(' ')} else ${n + 1} end as ord`;
  const extraColumn = extra === null ? 'false as x' : 'e.event = ? as x';
  if (extra !== null) values.push(extra);
  values.push(projectId, names, params.from, params.to);
  const scan = `select d.person_id, e.timestamp as t, ${matches.join(', ')}, ${ord}, ${extraColumn}
      from event e join person_distinct_id d on d.project_id = e.project_id and d.distinct_id = e.distinct_id
     where e.project_id = ? and e.event in (?) and e.timestamp >= ? and e.timestamp < ?`;
  const window = `window w as (partition by person_id order by t, ord
    rows between unbounded preceding and 1 preceding)`;
  // a_k: the start of the attempt this event takes to step k (null if it takes none there).
  const within = `make_interval(days => ${Number(params.windowDays)})`;
  const reach = (k: number) =>
    k === 1 ? 'case when m1 then t end' : `case when m${k} and t <= l${k - 1} + ${within} then l${k - 1} end`;
  let q = scan;
  for (let k = 1; k < n; k++) q = `select q.*, max(${reach(k)}) over w as l${k} from (${q}) q ${window}`;
  const level = `case ${Array.from({ length: n }, (_, i) => `when ${reach(n - i)} is not null then ${n - i}`).join(' ')}
    else 0 end`;
  return {
    sql: `select person_id, max(${level}) as level, bool_or(x) as extra from (${q}) q group by person_id`,
    params: values,
  };
}

/** Person ids at a funnel step: `step` > 0 reached it; `step` < 0 (−2..−n) reached step |step|−1 but not |step|. */
export function funnelPersonIds(
  em: EntityManager,
  projectId: number,
  params: FunnelParams,
  step: number,
  page: Page,
): Promise<PersonIdPage> {
  const k = Math.abs(step);
  const levels = funnelLevelsSql(projectId, params);
  const where = step > 0 ? `f.level >= ${k}` : `f.level = ${k - 1}`;
  const ids = { sql: `select f.person_id from (${levels.sql}) f where ${where}`, params: levels.params };
  return personIdPage(em, projectId, ids, page);
}

/** Persons who reached the last step (`converted`) or started and did not, and performed `entity` in the range. */
export function funnelCorrelationPersonIds(
  em: EntityManager,
  projectId: number,
  params: FunnelParams,
  entity: string,
  converted: boolean,
  page: Page,
): Promise<PersonIdPage> {
  const n = params.steps.length;
  const levels = funnelLevelsSql(projectId, params, entity);
  const where = converted ? `f.level = ${n}` : `f.level between 1 and ${n - 1}`;
  const ids = { sql: `select f.person_id from (${levels.sql}) f where f.extra and ${where}`, params: levels.params };
  return personIdPage(em, projectId, ids, page);
}

/** A lifecycle day's bound `days` after its start in the project's time zone: SQL and its parameters. */
function lifecycleBound({ day, timezone }: LifecycleParams, days: number): SqlFragment {
  const date = new Date(Date.UTC(day.getUTCFullYear(), day.getUTCMonth(), day.getUTCDate())).toISOString().slice(0, 10);
  return { sql: `(?::date + ${days})::timestamp at time zone ?::text`, params: [date, timezone] };
}

/** The SQL of the days' bounds (before, start, end) a lifecycle day reads, as one row. */
function lifecycleDays(lifecycle: LifecycleParams): SqlFragment {
  const [before, start, end] = [-1, 0, 1].map((d) => lifecycleBound(lifecycle, d));
  return {
    sql: `select ${before.sql} as "before", ${start.sql} as "start", ${end.sql} as "end"`,
    params: [...before.params, ...start.params, ...end.params],
  };
}

/**
 * Persons in a lifecycle bucket on a day, by PostHog's definitions: new (created that day and active),
 * returning (created before, active that day and the day before), resurrecting (created before, active
 * that day, not the day before), dormant (active the day before, not that day). One scan of the two
 * days' events, by a timestamp range (the days' bounds in the project's time zone), gives every
 * person's bucket; the page is of the bucket asked for.
 */
export function lifecyclePersonIds(
  em: EntityManager,
  projectId: number,
  lifecycle: LifecycleParams,
  page: Page,
): Promise<PersonIdPage> {
  const { type, event } = lifecycle;
  return analyticsRead(em, async (tx) => {
    // The bounds as values, so the planner sees the range it scans.
    const { before, start, end } = await lifecycleDayBounds(tx, lifecycle);
    // The bucket's own condition (a planner does better with it than with one case over all four).
    const bucket = {
      new: { sql: 'a.today and p.created_at >= ? and p.created_at < ?', params: [start, end] },
      returning: { sql: 'a.today and a.yesterday and p.created_at < ?', params: [start] },
      resurrecting: { sql: 'a.today and not a.yesterday and p.created_at < ?', params: [start] },
      dormant: { sql: 'a.yesterday and not a.today', params: [] },
    }[type];
    // One statement: the bucket's persons with their creation (kept, so the page is sorted without
    // reading the persons again), counted and paged newest first.
    const [found] = await rows<{ count: number; ids: string[] | null }>(
      tx,
      `with a as (
         select d.person_id, bool_or(e.timestamp >= ?) as today, bool_or(e.timestamp < ?) as yesterday
           from event e join person_distinct_id d on d.project_id = e.project_id and d.distinct_id = e.distinct_id
          where e.project_id = ? ${event === null ? '' : 'and e.event = ?'} and e.timestamp >= ? and e.timestamp < ?
          group by d.person_id),
       ids as materialized (select p.id, p.created_at from a join person p on p.id = a.person_id and p.project_id = ?
                             where ${bucket.sql})
       select (select count(*)::int from ids) as count,
              array(select id::text from ids order by created_at desc, id desc limit ? offset ?) as ids`,
      [
        start,
        start,
        projectId,
        ...(event === null ? [] : [event]),
        before,
        end,
        projectId,
        ...bucket.params,
        page.limit,
        page.offset,
      ],
    );
    return { count: found?.count ?? 0, personIds: found?.ids ?? [] };
  });
}

/** A lifecycle day's bounds in the project's time zone (the day before's start, its start, its end), as PostgreSQL computes them. */
export async function lifecycleDayBounds(
  em: EntityManager,
  lifecycle: LifecycleParams,
): Promise<{ before: Date; start: Date; end: Date }> {
  const days = lifecycleDays(lifecycle);
  // (As the driver hands them over: text, which Date reads.)
  const [b] = await rows<{ before: Date | string; start: Date | string; end: Date | string }>(
    em,
    days.sql,
    days.params,
  );
  return { before: new Date(b.before), start: new Date(b.start), end: new Date(b.end) };
}

// Sorts and hashes over a large project's events spill to disk at the server's default 4 MB; this is
// per sort or hash node of one statement, for its transaction only.
const WORK_MEM = '64MB';

/** Runs `read` in a transaction with the work_mem analytics statements need. */
function analyticsRead<T>(em: EntityManager, read: (tx: EntityManager) => Promise<T>): Promise<T> {
  return em.transactional(async (tx) => {
    await run(tx, `set local work_mem = '${WORK_MEM}'`);
    return read(tx);
  });
}

/** The count of `ids` (a statement with a person_id column) and one page of them, newest person first. */
function personIdPage(em: EntityManager, projectId: number, ids: SqlFragment, page: Page): Promise<PersonIdPage> {
  return analyticsRead(em, (tx) => idPage(tx, projectId, ids, page));
}

/** One statement: the id set is computed once (materialized) for both the count and the page. */
async function idPage(em: EntityManager, projectId: number, ids: SqlFragment, page: Page): Promise<PersonIdPage> {
  const found = await rows<{ count: number; id: string | null }>(
    em,
    `with ids as materialized (${ids.sql})
     select n.count, pg.id::text as id from (select count(*)::int as count from ids) n
       left join lateral (
         select p.id, p.created_at from person p
          where p.project_id = ? and p.id in (select person_id from ids)
          order by p.created_at desc, p.id desc limit ? offset ?) pg on true
      order by pg.created_at desc, pg.id desc`,
    [...ids.params, projectId, page.limit, page.offset],
  );
  return { count: found[0]?.count ?? 0, personIds: found.flatMap((r) => (r.id === null ? [] : [r.id])) };
}

/**
 * A page of persons given all their ids (an id set computed by another engine): the count is of the
 * ids, the page of the project's persons among them, newest first as idPage orders them. A large set
 * is paged by walking the project's persons newest first (person_project_created_idx) and keeping
 * those in the set, which stops once the page is full: sending every id back to PostgreSQL to sort
 * them was most of the ClickHouse store's time on a funnel step many persons reach. A sparse set
 * (the walk would read more persons than the set holds ids) is paged by its ids, as before.
 */
export async function personIdPageOf(
  em: EntityManager,
  projectId: number,
  personIds: readonly string[],
  page: Page,
  /** Persons the walk's first step reads (each further step four times more); 0: no walk, the ids' lookup. */
  walkChunk = 1000,
): Promise<PersonIdPage> {
  if (personIds.length === 0) return { count: 0, personIds: [] };
  const count = personIds.length;
  const wanted = page.offset + page.limit;
  if (page.limit <= 0) return { count, personIds: [] };
  const members = new Set(personIds);
  const found: string[] = [];
  // The walk reads at most twice as many persons as there are ids; past that, the ids' own lookup is cheaper.
  const budget = walkChunk <= 0 ? 0 : Math.max(walkChunk, 2 * count);
  let after: { createdAt: string; id: string } | null = null;
  for (let walked = 0, chunk = walkChunk; walked < budget; chunk *= 4) {
    const take = Math.min(chunk, budget - walked);
    let query = db(em)
      .selectFrom('person')
      // (Aliases unlike the columns: ORDER BY would take an output column of the same name, the text.)
      .select([sql<string>`id::text`.as('pid'), sql<string>`created_at::text`.as('at')])
      .where('project_id', '=', projectId);
    if (after !== null)
      query = query.where(sql<boolean>`(created_at, id) < (${after.createdAt}::timestamptz, ${after.id}::bigint)`);
    const persons = await query.orderBy('created_at', 'desc').orderBy('id', 'desc').limit(take).execute();
    for (const p of persons) if (members.has(p.pid) && found.push(p.pid) >= wanted) break;
    if (found.length >= wanted || persons.length < take) return { count, personIds: found.slice(page.offset) };
    walked += persons.length;
    const last = persons[persons.length - 1];
    after = { createdAt: last.at, id: last.pid };
  }
  const paged = await rows<{ id: string }>(
    em,
    `select p.id::text as id from person p where p.project_id = ? and p.id = any(?::bigint[])
      order by p.created_at desc, p.id desc limit ? offset ?`,
    [projectId, pgArray(personIds), page.limit, page.offset],
  );
  return { count, personIds: paged.map((r) => r.id) };
}

/**
 * The person's events up to `to`, oldest first, at most `limit` (what its properties timeline is
 * rebuilt from): per distinct id the first `limit` through the (project, distinct id, timestamp)
 * index, then merged, so the cost follows the person's events, not the project's.
 */
export function propertiesTimelineEvents(
  em: EntityManager,
  projectId: number,
  personId: string,
  to: Date,
  limit: number,
): Promise<TimelineEvent[]> {
  return rows<TimelineEvent>(
    em,
    `select e.event, e.properties, e.timestamp from person_distinct_id d
      cross join lateral (
        select e.event, e.properties, e.timestamp from event e
         where e.project_id = d.project_id and e.distinct_id = d.distinct_id and e.timestamp <= ?
         order by e.timestamp limit ?) e
      where d.project_id = ? and d.person_id = ?
      order by e.timestamp limit ?`,
    [to, limit, projectId, personId, limit],
  );
}

/**
 * The events of an experiment's filter as a FROM clause `e` (with columns distinct_id, event,
 * timestamp, properties, created_at) and its parameters. For a list of distinct ids, each id's events
 * through the distinct-id index (a lateral subquery the planner keeps per id: one range of the index
 * each, rather than the whole time range filtered).
 */
function experimentEventsFrom(projectId: number, filter: ExperimentEventFilter): SqlFragment {
  const where = `e.project_id = ? and e.timestamp >= ? and e.timestamp < ?
      and (e.event = any(?::text[]) or (e.event = '$feature_flag_called' and e.properties->>'$feature_flag' = ?))`;
  const params = [projectId, filter.from, filter.to, pgArray(filter.events), filter.flagKey];
  if (!filter.distinctIds) return { sql: `(select * from event e where ${where}) e`, params };
  return {
    sql: `unnest(?::text[]) as d(distinct_id) cross join lateral (
            select * from event e where e.distinct_id = d.distinct_id and ${where} offset 0) e`,
    params: [pgArray(filter.distinctIds), ...params],
  };
}

/**
 * EventStore.experimentEvents on PostgreSQL: the range (by event name and time) sorted by distinct id
 * (byte order), time and name, in parts by distinct id range (the planner's estimate of the rows
 * over EXPERIMENT_READ_PART; bounds from the project's
 * distinct ids), each one statement in a transaction of its own: PostgreSQL's parallel workers can
 * run it (a cursor's cannot), and the next part runs while the worker takes in this one. So memory
 * holds about a part. Each distinct id's rows become its columns (ExperimentEvents) as they are taken
 * in. `fork` gives an EntityManager for one part's read.
 */
export async function* experimentEvents(
  fork: () => EntityManager,
  projectId: number,
  filter: ExperimentEventFilter,
  properties: readonly ExperimentProperty[],
  partEvents = EXPERIMENT_READ_PART,
): AsyncGenerator<ExperimentEvents[]> {
  const from = experimentEventsFrom(projectId, filter);
  const names = experimentNames(filter);
  const numbers = new Map(names.map((name, i) => [name, i]));
  const select = `select e.distinct_id as "distinctId", e.event, (extract(epoch from e.timestamp) * 1000000)::float8 as t,
            case when e.event = '$feature_flag_called' and e.properties->>'$feature_flag' = ?
                 then e.properties->>'$feature_flag_response' end as exposure,
            json_build_array(${properties.map(() => 'case when e.event = any(?::text[]) then e.properties -> ? end').join(', ')}) as values
       from ${from.sql}`;
  const params = [filter.flagKey, ...properties.flatMap((p) => [pgArray(p.events), p.key]), ...from.params];
  const em = fork();
  const [plan] = await rows<{ 'QUERY PLAN': [{ Plan: { 'Plan Rows': number } }] }>(
    em,
    `explain (format json) ${select}`,
    params,
  );
  const parts = partsFor(plan['QUERY PLAN'][0].Plan['Plan Rows'], partEvents);
  const bounds =
    parts > 1
      ? partBounds(
          (
            await rows<{ bounds: (string | null)[] | null }>(
              em,
              `select percentile_disc(?::float8[]) within group (order by distinct_id collate "C") as bounds
                 from person_distinct_id where project_id = ?`,
              [pgArray(Array.from({ length: parts - 1 }, (_, i) => (i + 1) / parts)), projectId],
            )
          )[0].bounds ?? [],
        )
      : [];
  const part = (i: number) => {
    const { from, to } = partRange(bounds, i);
    const range = [
      ...(from === null ? [] : ['e."distinctId" collate "C" >= ?']),
      ...(to === null ? [] : ['e."distinctId" collate "C" < ?']),
    ];
    return analyticsRead(fork(), (tx) =>
      rows<{ distinctId: string; event: string; t: number; exposure: string | null; values: unknown[] }>(
        tx,
        `select * from (${select}) e ${range.length ? `where ${range.join(' and ')}` : ''}
          order by e."distinctId" collate "C", e.t, e.event collate "C"`,
        [...params, ...[from, to].filter((b) => b !== null)],
      ),
    );
  };
  // (A part already asked for runs to its end if the reader stops early: it holds no cursor.)
  for await (const found of inTurn(bounds.length + 1, part)) {
    // A part holds each of its distinct ids' rows together (ids do not straddle parts).
    const lists: ExperimentEvents[] = [];
    let list: ExperimentEvents | undefined;
    for (const row of found) {
      if (row.distinctId !== list?.distinctId) {
        list = { distinctId: row.distinctId, ...noEventColumns() };
        lists.push(list);
      }
      const j = list.t.length;
      list.t.push(row.t);
      list.name.push(numbers.get(row.event)!);
      if (row.exposure !== null) {
        list.exposureAt.push(j);
        list.exposure.push(row.exposure);
      }
      if (row.values.some((v) => v !== null)) {
        list.valuedAt.push(j);
        list.values.push(row.values);
      }
    }
    if (lists.length) yield lists;
  }
}

/** EventStore.hasExperimentEvents on PostgreSQL (arrivals through the index on created_at). */
export async function hasExperimentEvents(
  em: EntityManager,
  projectId: number,
  filter: ExperimentEventFilter,
  arrivedSince?: Date,
): Promise<boolean> {
  const from = experimentEventsFrom(projectId, filter);
  const found = await rows(em, `select 1 from ${from.sql} ${arrivedSince ? 'where e.created_at >= ?' : ''} limit 1`, [
    ...from.params,
    ...(arrivedSince ? [arrivedSince] : []),
  ]);
  return found.length > 0;
}
