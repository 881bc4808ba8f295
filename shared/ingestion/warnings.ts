// Ingestion warnings (PostHog's ingestion_warnings): capture answers 200 for a request it accepted, but
// an event in it may have been dropped or stored altered. Each such event leaves one row here, kept
// WARNING_RETENTION_DAYS; the API lists them per type with the most recent examples.
import type { Deps } from '../platform/deps.ts';
import type { EntityManager } from '@mikro-orm/postgresql';
import { expressionBuilder, type Selectable, type SqlBool, sql } from 'kysely';
import { type DB, db } from '../platform/db/kysely.ts';

export const WARNING_RETENTION_DAYS = 30;

/** The types recorded: PostHog's names where the situation is PostHog's, ours otherwise. */
export type IngestionWarningType =
  /** A timestamp outside years 1–9999 (after clock-skew correction): stored at the Unix epoch. */
  | 'ignored_invalid_timestamp'
  /** An event larger than PostHog's capture takes (MAX_EVENT_BYTES): the request is answered 413, nothing of it stored. */
  | 'message_size_too_large'
  /** A timestamp more than 23 hours ahead: stored at the server's time. */
  | 'event_timestamp_in_future'
  /** Ours: properties nested more than 128 levels deep; the event is not stored. */
  | 'event_dropped_too_deep'
  /** Ours: `$performance_event` (PostHog's capture drops it too); the event is not stored. */
  | 'event_dropped_performance_event'
  /** Ours: a `$snapshot` / `$snapshot_items` event without `$session_id`; not stored. */
  | 'snapshot_dropped_no_session_id'
  /** Ours: events of a distinct id suppressed by a deletion request (suppress=true); one warning per request. */
  | 'event_dropped_suppressed'
  /** Ours: NUL or a lone surrogate in the event's strings, replaced by U+FFFD. */
  | 'invalid_unicode_replaced'
  /** Ours: the event name cut to 400 or the distinct id to 200 characters. */
  | 'event_field_truncated'
  /** A merge with an illegal distinct id ("null", "anonymous", …, or over 400 characters) was not made. */
  | 'cannot_merge_with_illegal_distinct_id'
  /** A merge into another identified person (not $merge_dangerously) was not made. */
  | 'cannot_merge_already_identified'
  /** Ours: the tracking plan's mode `quarantine`: held in quarantine (listed and replayable), not stored. */
  | 'event_quarantined_by_plan'
  /** Ours: the tracking plan's mode `drop`: a violating event not stored. */
  | 'event_dropped_by_plan'
  /** Ours: a drop rule of the tracking plan (event name, property or distinct id): not stored. */
  | 'event_dropped_by_rule'
  /** Ours: the tracking plan's mode `stamp`: stored with its violations in `$plan_violations`. */
  | 'event_plan_violations_stamped'
  /** Ours: the tracking plan's mode `omit`: stored without the properties that violated the plan. */
  | 'event_plan_properties_omitted'
  /** Ours: a quarantined event not replayed: its person was deleted after it was quarantined. */
  | 'event_dropped_person_deleted';

export interface IngestionWarningInput {
  type: IngestionWarningType;
  eventUuid: string | null;
  distinctId: string | null;
  details: Record<string, unknown>;
}

/** Records one request's warnings in one statement (inside the caller's transaction when there is one). */
export async function recordWarnings(
  em: EntityManager,
  projectId: number,
  warnings: readonly IngestionWarningInput[],
): Promise<void> {
  if (warnings.length === 0) return;
  const payload = JSON.stringify(
    warnings.map((w) => ({ type: w.type, event_uuid: w.eventUuid, distinct_id: w.distinctId, details: w.details })),
  );
  await db(em)
    .insertInto('ingestion_warning')
    .columns(['project_id', 'type', 'event_uuid', 'distinct_id', 'details'])
    .expression((eb) =>
      eb
        .selectFrom(
          sql<{
            type: string;
            event_uuid: string | null;
            distinct_id: string | null;
            details: Record<string, unknown> | null;
          }>`jsonb_to_recordset(${payload}::jsonb)`.as<'r'>(
            sql`r(type text, event_uuid uuid, distinct_id text, details jsonb)`,
          ),
        )
        .select((s) => [
          eb.val(projectId).as('project_id'),
          'r.type',
          'r.event_uuid',
          s.fn<string | null>('left', ['r.distinct_id', s.val(400)]).as('distinct_id'),
          s.fn.coalesce('r.details', sql<Record<string, unknown>>`'{}'`).as('details'),
        ]),
    )
    .execute();
}

export interface WarningSummary {
  type: string;
  lastSeen: Date;
  count: number;
  /** [count, day] per UTC day with warnings of this type, oldest day first (PostHog's sparkline). */
  sparkline: [number, string][];
  warnings: { type: string; timestamp: Date; details: Record<string, unknown> }[];
}

/**
 * The last WARNING_RETENTION_DAYS of a project's warnings, one summary per type (most recently seen
 * first) with its count and its `examples` most recent warnings. `search` keeps the warnings whose type
 * or details contain it (PostHog's `q`); `type` keeps one type.
 */
export async function warningSummaries(
  em: EntityManager,
  projectId: number,
  options: { examples: number; search?: string; type?: string },
): Promise<WarningSummary[]> {
  const search = options.search === undefined || options.search === '' ? null : options.search;
  const type = options.type ?? null;
  // The warnings of the window: this project's within the retention, of `type`, containing `search`.
  const w = expressionBuilder<{ w: DB['ingestion_warning'] }, 'w'>();
  const contains = (text: unknown) => sql<SqlBool>`strpos(${text}, ${search}::text) > 0`;
  const window = w.and([
    w('w.project_id', '=', projectId),
    w('w.timestamp', '>', sql<Date>`now() - make_interval(days => ${WARNING_RETENTION_DAYS})`),
    ...(type === null ? [] : [w('w.type', '=', type)]),
    ...(search === null
      ? []
      : [
          w.or([
            contains(w.ref('w.type')),
            contains(sql`w.details::text`),
            contains(w.fn.coalesce('w.distinct_id', w.val(''))),
            contains(sql`coalesce(w.event_uuid::text, '')`),
          ]),
        ]),
  ]);
  type Example = Pick<Selectable<DB['ingestion_warning']>, 'event_uuid' | 'distinct_id' | 'details'> & {
    timestamp: string;
  };
  const found = await db(em)
    .with('matching', (q) => q.selectFrom('ingestion_warning as w').select(['w.type', 'w.timestamp']).where(window))
    .with('types', (q) =>
      q
        .selectFrom('matching')
        .select((eb) => ['type', sql<number>`count(*)::int`.as('count'), eb.fn.max('timestamp').as('last_seen')])
        .groupBy('type'),
    )
    .with('days', (q) =>
      q
        .selectFrom((d) =>
          d
            .selectFrom('matching')
            .select([
              'type',
              sql<number>`count(*)::int`.as('n'),
              sql<string>`to_char(timestamp at time zone 'UTC', 'YYYY-MM-DD')`.as('day'),
            ])
            .groupBy(['type', sql`3`])
            .as('d'),
        )
        .select(['d.type', sql<[number, string][]>`jsonb_agg(jsonb_build_array(n, day) order by day)`.as('sparkline')])
        .groupBy('d.type'),
    )
    .selectFrom('types as t')
    .innerJoin('days as d', 'd.type', 't.type')
    .crossJoinLateral((eb) =>
      eb
        .selectFrom((x) =>
          x
            .selectFrom('ingestion_warning as w')
            .select(['w.id', 'w.timestamp', 'w.event_uuid', 'w.distinct_id', 'w.details'])
            .where(window)
            .whereRef('w.type', '=', 't.type')
            .orderBy('w.timestamp', 'desc')
            .orderBy('w.id', 'desc')
            .limit(options.examples)
            .as('x'),
        )
        .select(
          sql<Example[]>`jsonb_agg(jsonb_build_object('timestamp', x.timestamp, 'event_uuid', x.event_uuid,
                                   'distinct_id', x.distinct_id, 'details', x.details)
                  order by x.timestamp desc, x.id desc)`.as('examples'),
        )
        .as('e'),
    )
    .select(['t.type', 't.count', 't.last_seen', 'd.sparkline', 'e.examples'])
    .orderBy('t.last_seen', 'desc')
    .orderBy('t.type')
    .execute();
  return found.map((row) => ({
    type: row.type,
    lastSeen: new Date(row.last_seen),
    count: row.count,
    sparkline: row.sparkline,
    warnings: row.examples.map((example) => ({
      type: row.type,
      timestamp: new Date(example.timestamp),
      // As PostHog's details carry them, so a client links a warning to its event and person.
      details: { ...example.details, eventUuid: example.event_uuid, distinctId: example.distinct_id },
    })),
  }));
}

/** Deletes the warnings older than WARNING_RETENTION_DAYS (of every project); returns how many. */
export async function purgeOldWarnings(em: EntityManager): Promise<number> {
  const { numDeletedRows } = await db(em)
    .deleteFrom('ingestion_warning')
    .where('timestamp', '<', sql<Date>`now() - make_interval(days => ${WARNING_RETENTION_DAYS})`)
    .executeTakeFirst();
  return Number(numDeletedRows);
}

/** The daily upkeep's part (scheduler `event-partitions`): warnings past their 30 days. */
export async function purgeWarningsJob(
  _job: unknown,
  deps: Pick<Deps, 'orm' | 'logger'>,
): Promise<{ ingestionWarningsPurged: number }> {
  const ingestionWarningsPurged = await purgeOldWarnings(deps.orm.em.fork());
  if (ingestionWarningsPurged > 0) deps.logger.info({ ingestionWarningsPurged }, 'old ingestion warnings purged');
  return { ingestionWarningsPurged };
}
