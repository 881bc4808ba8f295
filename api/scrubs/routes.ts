// Scrubs by content: POST …/event_scrubs/ (events by name, property filters, distinct ids and a time
// range: deleted, or stripped of keys) and …/recording_scrubs/ (recordings of distinct ids in a time
// range: deleted), each with its status, list and cancel. The rules are in shared/scrubs/.
import { BIGINT_ID_PATTERN } from '../../shared/platform/ids.ts';
import {
  cancelScrub,
  createScrub,
  getScrub,
  listScrubs,
  previewScrub,
  SCRUB_MAX_DISTINCT_IDS,
  SCRUB_MAX_KEYS,
  ScrubInputError,
  type ScrubInput,
  type ScrubTarget,
} from '../../shared/scrubs/index.ts';
import { conflict, notFound, validationError } from '../http/errors.ts';
import { PAGE_QUERY_PROPERTIES, pageOf, paginated, paginatedSchema } from '../http/pagination.ts';
import { actorOf, defineRoute, type ApiContext } from '../http/routes.ts';
import { dateTime, nullableDateTime, nullableString, openObject, record } from '../http/schemas.ts';
import { deletionWork, idempotencyKeyOf, keyReused } from '../persons/deletion-requests.ts';

const SCRUB_ID = { id: { type: 'string', pattern: BIGINT_ID_PATTERN, description: "The scrub's id" } } as const;
const TAGS = ['scrubs'];
/** A PostHog property filter tree: an array of filters, or an AND/OR group (checked by the service). */
const FILTER_TREE = {
  type: ['array', 'object'],
  items: openObject('A property filter or a group'),
  additionalProperties: true,
} as const;
const count = { type: 'integer', minimum: 0 };
const counts = { type: ['object', 'null'], additionalProperties: count };

const receiptSchema = {
  type: ['object', 'null'],
  required: ['key_id', 'algorithm', 'signature', 'signed_content', 'body'],
  description:
    "Once completed: the signed receipt (counts before and after per store). Verify `signed_content` (UTF-8) against `signature` (base64 Ed25519) with the deletion receipts' key key_id (GET …/persons/deletion_receipts/public_key/)",
  properties: {
    key_id: { type: 'string' },
    algorithm: { const: 'Ed25519' },
    signature: { type: 'string' },
    signed_content: { type: 'string' },
    body: openObject('The receipt, as signed_content says it'),
  },
};

const scrubSchema = record({
  id: SCRUB_ID.id,
  project_id: { type: 'integer' },
  target: { enum: ['events', 'recordings'] },
  action: { enum: ['delete', 'strip_properties'] },
  mode: { enum: ['now', 'off_peak'] },
  status: { enum: ['pending', 'running', 'completed', 'failed', 'cancelled'] },
  filter: record({
    event: nullableString,
    properties: FILTER_TREE,
    after: dateTime,
    before: dateTime,
    distinct_ids: { type: ['array', 'null'], items: { type: 'string' } },
    keys: { type: ['array', 'null'], items: { type: 'string' } },
  }),
  cutoff: {
    ...dateTime,
    description: 'Only events (recordings) received up to this moment (the request) are scrubbed',
  },
  run_after: { ...dateTime, description: 'When it runs: at once (mode now) or the next off-peak window' },
  created_at: dateTime,
  started_at: nullableDateTime,
  completed_at: nullableDateTime,
  cancelled_at: nullableDateTime,
  attempts: count,
  last_error: nullableString,
  counts_before: counts,
  counts_after: counts,
  rows_changed: counts,
  receipt: receiptSchema,
});

const dryRunSchema = record({
  dry_run: { const: true },
  would_change: { type: 'object', additionalProperties: count, description: 'Per store, what would change now' },
  starts_at: { ...dateTime, description: 'When it would run' },
});

const DRY_RUN = {
  type: 'boolean',
  description: 'Answer what would change now, per store, and when it would run; nothing is written',
} as const;
const range = {
  after: { ...dateTime, description: 'Events (recordings: sessions started) at or after this time' },
  before: { ...dateTime, description: 'Events before this time; at most 400 days after `after`' },
  distinct_ids: {
    type: 'array',
    minItems: 1,
    maxItems: SCRUB_MAX_DISTINCT_IDS,
    items: { type: 'string', minLength: 1, maxLength: 400 },
  },
  mode: { enum: ['now', 'off_peak'], description: 'now: at once; default off_peak: the nightly deletion window' },
} as const;

const eventScrubBody = {
  type: 'object',
  required: ['after', 'before', 'action'],
  properties: {
    event: { type: 'string', minLength: 1, maxLength: 400, description: 'Only events of this name' },
    properties: {
      ...FILTER_TREE,
      description: 'PostHog property filters over the events’ properties (as person and cohort filters)',
    },
    ...range,
    action: { enum: ['delete', 'strip_properties'] },
    keys: {
      type: 'array',
      minItems: 1,
      maxItems: SCRUB_MAX_KEYS,
      items: { type: 'string', minLength: 1, maxLength: 400 },
      description: 'strip_properties: the property keys removed from the matching events',
    },
  },
} as const;

const recordingScrubBody = {
  type: 'object',
  required: ['after', 'before', 'distinct_ids'],
  properties: { ...range, action: { const: 'delete' } },
} as const;

async function answerScrub(ctx: ApiContext, target: ScrubTarget, input: ScrubInput) {
  const projectId = ctx.state.project.id;
  try {
    if (ctx.state.query.dry_run === true) {
      ctx.body = await previewScrub(ctx.state.em, ctx.deps.events, ctx.deps.config, projectId, input);
      return;
    }
    const key = idempotencyKeyOf(ctx, `${target}_scrub`);
    const result = await createScrub(ctx.state.em, actorOf(ctx), input, key, ctx.deps.queues, ctx.deps.config);
    if (result === 'key_reused') throw keyReused();
    if (result.replayed) ctx.set('Idempotent-Replayed', 'true');
    ctx.status = result.status;
    ctx.body = result.body;
  } catch (error) {
    if (error instanceof ScrubInputError) throw validationError(error.message, error.attr);
    throw error;
  }
}

function scrubRoutes(target: ScrubTarget, collection: string, what: string) {
  const P = `/api/projects/:project_id/${collection}`;
  return [
    defineRoute({
      method: 'POST',
      path: P,
      summary: `Scrub ${what}: ${target === 'events' ? 'delete them, or strip property keys from them' : 'delete them'}, now or in the off-peak window`,
      tags: TAGS,
      scopes: ['person:write'],
      destructive: true,
      query: { type: 'object', properties: { dry_run: DRY_RUN } },
      body: target === 'events' ? eventScrubBody : recordingScrubBody,
      headers: deletionWork.headers,
      responses: {
        ...deletionWork.responses,
        200: { description: 'dry_run=true: what would change now, per store', schema: dryRunSchema },
        202: { description: 'The scrub, queued', schema: scrubSchema },
      },
      handler: (ctx) => {
        const b = ctx.state.body as Record<string, unknown>;
        return answerScrub(ctx as ApiContext, target, {
          target,
          action: (b.action as ScrubInput['action']) ?? 'delete',
          mode: (b.mode as ScrubInput['mode']) ?? 'off_peak',
          event: (b.event as string | undefined) ?? null,
          properties: b.properties,
          after: b.after as string,
          before: b.before as string,
          distinct_ids: (b.distinct_ids as string[] | undefined) ?? null,
          keys: (b.keys as string[] | undefined) ?? null,
        });
      },
    }),
    defineRoute({
      method: 'GET',
      path: P,
      summary: `The project's ${target} scrubs, newest first`,
      tags: TAGS,
      scopes: ['person:read'],
      query: { type: 'object', properties: PAGE_QUERY_PROPERTIES },
      responses: { 200: { description: 'A page', schema: paginatedSchema(scrubSchema) } },
      handler: async (ctx) => {
        const page = pageOf(ctx.state.query);
        const found = await listScrubs(ctx.state.em, ctx.state.project.id, target, page);
        ctx.body = paginated(ctx, page, found.count, found.results);
      },
    }),
    defineRoute({
      method: 'GET',
      path: `${P}/:id`,
      params: SCRUB_ID,
      summary: 'A scrub: its status, counts per store and, once completed, its signed receipt',
      tags: TAGS,
      scopes: ['person:read'],
      responses: { 200: { description: 'The scrub', schema: scrubSchema }, 404: { description: 'Not found' } },
      handler: async (ctx) => {
        const scrub = await getScrub(ctx.state.em, ctx.state.project.id, ctx.state.params.id);
        if (!scrub || scrub.target !== target) throw notFound();
        ctx.body = scrub;
      },
    }),
    defineRoute({
      method: 'POST',
      path: `${P}/:id/cancel`,
      params: SCRUB_ID,
      summary: 'Cancel a pending scrub (before a worker has claimed it); 409 once claimed or ended',
      tags: TAGS,
      scopes: ['person:write'],
      destructive: true,
      responses: {
        200: { description: 'The cancelled scrub', schema: scrubSchema },
        404: { description: 'No such scrub in this project' },
        409: { description: 'Too late: a worker has claimed it, or it ended' },
      },
      handler: async (ctx) => {
        const id = ctx.state.params.id;
        const existing = await getScrub(ctx.state.em, ctx.state.project.id, id);
        if (!existing || existing.target !== target) throw notFound();
        const result = await cancelScrub(ctx.state.em, actorOf(ctx), id, ctx.deps.queues);
        if (!result) throw notFound();
        if (result.outcome === 'too_late')
          throw conflict(`Scrub ${id} is ${result.scrub.status}; only a pending scrub can be cancelled.`);
        ctx.body = result.scrub;
      },
    }),
  ];
}

export const scrubRouteList = [
  ...scrubRoutes('events', 'event_scrubs', 'events matching a filter'),
  ...scrubRoutes('recordings', 'recording_scrubs', 'session recordings of distinct ids in a time range'),
];
