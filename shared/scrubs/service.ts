// Scrubs by content as users ask for them: checked (a bounded time range, a filter PostgreSQL and
// ClickHouse can both say, at most 2,000 distinct ids), answered as a dry run (what each store holds
// that would change now, and when it would run), recorded under an Idempotency-Key with their
// scrub.queued webhook, cancelled while pending. The deletions' machinery is reused through its face:
// idempotency keys, the off-peak window, receipts' signing key.
import type { EntityManager } from '@mikro-orm/postgresql';
import { recordActivity, type Actor } from '../platform/activity-log.ts';
import { canonicalJson } from '../platform/canonical-json.ts';
import type { Config } from '../platform/config.ts';
import { FilterError, propertyFiltersSql } from '../platform/db/property-filters.ts';
import { enqueueRowJobs, enqueueWebhookDeliveries, type Queues, type RowJob } from '../platform/queues.ts';
import { JOBS, type JobData } from '../platform/jobs.ts';
import { defaultSchedules, readSchedules } from '../platform/schedules.ts';
import {
  answerOnce,
  countScrubRecordings,
  deletionCrons,
  type IdempotencyKey,
  nextWindowStart,
} from '../deletions/index.ts';
import type { EventScrubMatch, EventStore } from '../events/index.ts';
import {
  cancelPendingScrub,
  insertScrub,
  listScrubs as listScrubRows,
  scrubById,
  type ScrubAction,
  type ScrubFilter,
  type ScrubMode,
  type ScrubTarget,
  type ScrubView,
} from './store.ts';
import { queueScrubEvents } from './webhooks.ts';

/** The longest time range one scrub covers. */
export const SCRUB_MAX_DAYS = 400;
/** Distinct ids one scrub names at most. */
export const SCRUB_MAX_DISTINCT_IDS = 2000;
/** Keys strip_properties removes at most. */
export const SCRUB_MAX_KEYS = 100;

/** Bad input for a scrub: the message and the field, for a 400. */
export class ScrubInputError extends Error {
  readonly attr: string | null;
  constructor(message: string, attr: string | null) {
    super(message);
    this.attr = attr;
  }
}

export interface ScrubInput {
  target: ScrubTarget;
  action: ScrubAction;
  mode: ScrubMode;
  event?: string | null;
  properties?: unknown;
  after: string;
  before: string;
  distinct_ids?: string[] | null;
  keys?: string[] | null;
}

const DAY_MS = 86_400_000;

/** The input checked and normalized as it is stored; throws ScrubInputError. */
export function checkScrub(input: ScrubInput): ScrubFilter {
  const after = Date.parse(input.after);
  const before = Date.parse(input.before);
  if (Number.isNaN(after)) throw new ScrubInputError('Enter a valid date-time.', 'after');
  if (Number.isNaN(before)) throw new ScrubInputError('Enter a valid date-time.', 'before');
  if (after >= before) throw new ScrubInputError('after must be earlier than before.', 'before');
  if (before - after > SCRUB_MAX_DAYS * DAY_MS)
    throw new ScrubInputError(`A scrub covers at most ${SCRUB_MAX_DAYS} days; split it into several.`, 'before');
  const distinctIds = input.distinct_ids ?? null;
  if (distinctIds && distinctIds.length > SCRUB_MAX_DISTINCT_IDS)
    throw new ScrubInputError(`At most ${SCRUB_MAX_DISTINCT_IDS} distinct_ids in one scrub.`, 'distinct_ids');
  if (distinctIds && distinctIds.length === 0)
    throw new ScrubInputError('distinct_ids may not be empty; leave it out to match any.', 'distinct_ids');
  const keys = input.keys ?? null;
  if (input.target === 'recordings') {
    if (input.action !== 'delete') throw new ScrubInputError('Recordings can only be deleted.', 'action');
    if (!distinctIds) throw new ScrubInputError('A recording scrub needs distinct_ids.', 'distinct_ids');
    return {
      event: null,
      properties: [],
      after: iso(after),
      before: iso(before),
      distinct_ids: distinctIds,
      keys: null,
    };
  }
  if (input.action === 'strip_properties') {
    if (!keys || keys.length === 0) throw new ScrubInputError('strip_properties needs keys to remove.', 'keys');
    if (keys.length > SCRUB_MAX_KEYS) throw new ScrubInputError(`At most ${SCRUB_MAX_KEYS} keys.`, 'keys');
  } else if (keys !== null) throw new ScrubInputError('keys only go with action strip_properties.', 'keys');
  const properties = (input.properties ?? []) as ScrubFilter['properties'];
  try {
    propertyFiltersSql(properties, 'properties');
  } catch (error) {
    if (error instanceof FilterError) throw new ScrubInputError(error.message, 'properties');
    throw error;
  }
  const event = input.event ?? null;
  const hasProperties = Array.isArray(properties) ? properties.length > 0 : true;
  if (event === null && !hasProperties && !distinctIds)
    throw new ScrubInputError(
      'Name an event, property filters or distinct_ids: a scrub never matches everything.',
      null,
    );
  return { event, properties, after: iso(after), before: iso(before), distinct_ids: distinctIds, keys };
}

const iso = (ms: number) => new Date(ms).toISOString();

/** The event store's match of a stored scrub, up to its cutoff. */
export const eventMatchOf = (filter: ScrubFilter, cutoff: string, strip: boolean): EventScrubMatch => ({
  event: filter.event,
  properties: filter.properties,
  after: new Date(filter.after),
  before: new Date(filter.before),
  distinctIds: filter.distinct_ids,
  cutoff,
  ...(strip && filter.keys ? { keys: filter.keys } : {}),
});

export const recordingMatchOf = (filter: ScrubFilter, cutoff: string) => ({
  distinctIds: filter.distinct_ids ?? [],
  after: new Date(filter.after),
  before: new Date(filter.before),
  cutoff,
});

/** What one stored scrub's store counts are (events: per event store; recordings: sessions and snapshots). */
export async function scrubCounts(
  em: EntityManager,
  events: EventStore,
  projectId: number,
  target: ScrubTarget,
  action: ScrubAction,
  filter: ScrubFilter,
  cutoff: string,
): Promise<Record<string, number>> {
  if (target === 'recordings') return countScrubRecordings(em, projectId, recordingMatchOf(filter, cutoff));
  const counts = await events.scrubEventCounts(projectId, eventMatchOf(filter, cutoff, action === 'strip_properties'));
  return Object.fromEntries(Object.entries(counts).filter(([, n]) => n !== undefined)) as Record<string, number>;
}

/** When a scrub of `mode` asked now would run. */
async function runAfterOf(em: EntityManager, config: Pick<Config, 'deletion' | 'schedules'>, mode: ScrubMode) {
  if (mode === 'now') return null;
  const crons = deletionCrons(await readSchedules(em, defaultSchedules(config)));
  return nextWindowStart(crons.off_peak, new Date());
}

export interface ScrubDryRun {
  dry_run: true;
  /** Per store: what would change if it ran now (events: matching events, those carrying a key for strip_properties). */
  would_change: Record<string, number>;
  /** When it would run: now, or the next off-peak window. */
  starts_at: string;
}

/** A dry run: what each store holds that the scrub would change now, and when it would run. Reads only. */
export async function previewScrub(
  em: EntityManager,
  events: EventStore,
  config: Pick<Config, 'deletion' | 'schedules'>,
  projectId: number,
  input: ScrubInput,
): Promise<ScrubDryRun> {
  const filter = checkScrub(input);
  const now = new Date().toISOString();
  const would = await scrubCounts(em, events, projectId, input.target, input.action, filter, now);
  const runAfter = await runAfterOf(em, config, input.mode);
  return { dry_run: true, would_change: would, starts_at: (runAfter ?? new Date()).toISOString() };
}

/** One job per scrub row (jobId scrub-<id>), added idempotently; the row stays the source of truth. */
export const SCRUB_JOB: RowJob = {
  what: 'scrub',
  name: JOBS.scrub.name,
  jobId: (id) => `scrub-${id}`,
  data: (id) => ({ scrubId: id }) satisfies JobData['scrub'],
};

/** The canonical form a receipt's signature covers. */
export const canonical = (body: unknown) => canonicalJson(body);

/**
 * Records a scrub (with an activity entry and its scrub.queued webhook) under the Idempotency-Key when
 * there is one: a retry answers the first answer. A scrub of mode now goes to the worker after the commit
 * (if Redis is down, the worker's reconciler hands it over); an off-peak one waits for its window.
 */
export async function createScrub(
  em: EntityManager,
  actor: Actor,
  input: ScrubInput,
  key: IdempotencyKey | null,
  queues: Pick<Queues, 'deletions' | 'webhooks'>,
  config: Pick<Config, 'deletion' | 'schedules'>,
): Promise<{ status: number; body: unknown; replayed: boolean } | 'key_reused'> {
  const filter = checkScrub(input);
  return answerOnce(em, actor.projectId, key, async (tx) => {
    const runAfter = await runAfterOf(tx, config, input.mode);
    const id = await insertScrub(tx, {
      projectId: actor.projectId,
      target: input.target,
      action: input.action,
      mode: input.mode,
      filter,
      runAfter,
      createdById: actor.userId,
    });
    await recordActivity(tx, {
      ...actor,
      scope: 'EventScrub',
      itemId: id,
      activity: 'created',
      detail: { name: `${input.target} ${input.action}`, type: input.mode },
    });
    const deliveries = await queueScrubEvents(tx, actor.projectId, 'queued', id);
    const scrub = (await scrubById(tx, actor.projectId, id, canonical))!;
    return {
      answer: { status: 202, body: scrub },
      afterCommit: async () => {
        if (input.mode === 'now') await enqueueRowJobs(queues.deletions, SCRUB_JOB, [id]);
        await enqueueWebhookDeliveries(queues.webhooks, deliveries);
      },
    };
  });
}

export const getScrub = (em: EntityManager, projectId: number, id: string) => scrubById(em, projectId, id, canonical);

export const listScrubs = (
  em: EntityManager,
  projectId: number,
  target: ScrubTarget,
  page: { limit: number; offset: number },
) => listScrubRows(em, projectId, target, page, canonical);

/**
 * Cancels a pending scrub (with an activity entry and scrub.cancelled) in one transaction: 'cancelled'
 * (now or before), 'too_late' (a worker claimed it, or it ended), undefined (no such scrub in the project).
 */
export async function cancelScrub(
  em: EntityManager,
  actor: Actor,
  id: string,
  queues: Pick<Queues, 'webhooks'>,
): Promise<{ outcome: 'cancelled' | 'too_late'; scrub: ScrubView } | undefined> {
  const done = await em.fork().transactional(async (tx) => {
    const result = await cancelPendingScrub(tx, actor.projectId, id);
    if (!result) return undefined;
    let deliveries: string[] = [];
    if (result.cancelled) {
      deliveries = await queueScrubEvents(tx, actor.projectId, 'cancelled', id);
      await recordActivity(tx, {
        ...actor,
        scope: 'EventScrub',
        itemId: id,
        activity: 'cancelled',
        detail: {
          changes: [{ type: 'EventScrub', action: 'changed', field: 'status', before: 'pending', after: 'cancelled' }],
        },
      });
    }
    const scrub = (await scrubById(tx, actor.projectId, id, canonical))!;
    return {
      outcome: result.status === 'cancelled' ? ('cancelled' as const) : ('too_late' as const),
      scrub,
      deliveries,
    };
  });
  if (!done) return undefined;
  await enqueueWebhookDeliveries(queues.webhooks, done.deliveries);
  return { outcome: done.outcome, scrub: done.scrub };
}
