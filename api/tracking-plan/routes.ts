// A project's tracking plan: the document in force and its versions, what a proposed one would change,
// the drop rules alone, the quarantine and its replay. shared/tracking-plan/ holds the rules.
import {
  DIFF_SAMPLE,
  PLAN_DOCUMENT_SCHEMA,
  PlanInputError,
  type PlanVersionRow,
  type ReplayRow,
  countQuarantine,
  currentPlanVersion,
  diffPlan,
  enqueueReplay,
  filterOf,
  findReplay,
  insertReplay,
  listPlanVersions,
  listQuarantine,
  putPlan,
  replayAll,
  replayDryRun,
} from '../../shared/tracking-plan/index.ts';
import { answerOnce } from '../../shared/deletions/index.ts';
import { isoTimestamp } from '../../shared/platform/time.ts';
import { ApiError, notFound, validationError } from '../http/errors.ts';
import { PAGE_QUERY_PROPERTIES, pageOf, paginated, paginatedSchema } from '../http/pagination.ts';
import { type ApiContext, defineRoute } from '../http/routes.ts';
import { dateTime, nullableInteger, openObject, record } from '../http/schemas.ts';
import { deletionWork, idempotencyKeyOf } from '../persons/deletion-requests.ts';

const P = '/api/projects/:project_id/tracking_plan';
const TAGS = ['tracking plan'];
const READ = ['event_definition:read'];
const WRITE = ['event_definition:write'];

const versionSchema = record({
  version: nullableInteger,
  document: { type: ['object', 'null'], additionalProperties: true },
  created_at: { type: ['string', 'null'], format: 'date-time' },
  created_by_id: nullableInteger,
});

const serializeVersion = (row: PlanVersionRow | null) => ({
  version: row?.version ?? null,
  document: row?.document ?? null,
  created_at: row ? isoTimestamp(row.created_at) : null,
  created_by_id: row?.created_by_id ?? null,
});

/** Stores a document as the next version; this process drops its cached plan at once, the others on notification. */
async function replacePlan(ctx: ApiContext, document: unknown) {
  const projectId = ctx.state.project.id;
  try {
    const row = await putPlan(ctx.state.em, projectId, ctx.state.auth.userId, document);
    ctx.deps.planCache?.invalidate(new Set([projectId]));
    return row;
  } catch (error) {
    if (error instanceof PlanInputError) throw validationError(error.message, error.attr);
    throw error;
  }
}

const violationSchema = record({
  kind: { type: 'string' },
  property: { type: ['string', 'null'] },
  message: { type: 'string' },
});

const quarantinedSchema = record({
  uuid: { type: 'string', format: 'uuid' },
  event: { type: 'string' },
  distinct_id: { type: 'string' },
  properties: openObject("The event's properties as captured"),
  timestamp: dateTime,
  violations: { type: 'array', items: violationSchema },
  plan_version: { type: 'integer' },
  quarantined_at: dateTime,
});

const countsSchema = {
  selected: { type: 'integer', description: 'Quarantined events the filter selected' },
  stored: { type: 'integer', description: 'Stored: they pass the plan in force now' },
  still_violating: { type: 'integer', description: 'Kept in quarantine, with their violations as of now' },
  dropped: {
    type: 'integer',
    description: 'Dropped: a drop rule, the mode drop, a suppressed distinct id or a person deleted since',
  },
};

const replaySchema = record({
  id: { type: 'string' },
  status: { enum: ['queued', 'running', 'done', 'failed'] },
  filter: openObject(),
  created_at: dateTime,
  finished_at: { type: ['string', 'null'], format: 'date-time' },
  last_error: { type: ['string', 'null'] },
  ...countsSchema,
});

const serializeReplay = (row: ReplayRow) => ({
  id: row.id,
  status: row.status,
  filter: row.filter,
  created_at: isoTimestamp(row.created_at),
  finished_at: isoTimestamp(row.finished_at),
  last_error: row.last_error,
  selected: row.selected,
  stored: row.stored,
  still_violating: row.still_violating,
  dropped: row.dropped,
});

const quarantineFilterProperties = {
  event: { type: 'string', minLength: 1, maxLength: 400, description: 'Only events of this name' },
  since: { type: 'string', format: 'date-time', description: 'Only events quarantined at or after this time' },
} as const;

/** The dry run's sample bound: what it checks of the selection. */
const DRY_RUN_SAMPLE = 10_000;

export const trackingPlanRoutes = [
  defineRoute({
    method: 'GET',
    path: P,
    summary: 'The tracking plan in force (version null: the project has none, and capture stores events as sent)',
    tags: TAGS,
    scopes: READ,
    responses: { 200: { description: 'The plan and its version', schema: versionSchema } },
    handler: async (ctx) => {
      ctx.body = serializeVersion(await currentPlanVersion(ctx.state.em, ctx.state.project.id));
    },
  }),
  defineRoute({
    method: 'PUT',
    path: P,
    summary:
      'Replace the tracking plan: a new version, in force on every API process within seconds (events: per name a mode and a JSON Schema 2020-12 of its properties; default_mode; drop_rules)',
    tags: TAGS,
    scopes: WRITE,
    body: PLAN_DOCUMENT_SCHEMA,
    responses: { 200: { description: 'The new version', schema: versionSchema } },
    handler: async (ctx) => {
      ctx.body = serializeVersion(await replacePlan(ctx, ctx.state.body));
    },
  }),
  defineRoute({
    method: 'GET',
    path: `${P}/versions`,
    summary: "The tracking plan's versions, newest first, with who made each and when",
    tags: TAGS,
    scopes: READ,
    query: { type: 'object', properties: { ...PAGE_QUERY_PROPERTIES } },
    responses: { 200: { description: 'A page of versions', schema: paginatedSchema(versionSchema) } },
    handler: async (ctx) => {
      const page = pageOf(ctx.state.query);
      const found = await listPlanVersions(ctx.state.em, ctx.state.project.id, page);
      ctx.body = paginated(ctx, page, found.count, found.rows.map(serializeVersion));
    },
  }),
  defineRoute({
    method: 'POST',
    path: `${P}/diff`,
    summary: `What a proposed plan would change (events added, removed, changed) and how many of the last 7 days' events it would find violating (checked on the newest ${DIFF_SAMPLE}, scaled when there are more)`,
    tags: TAGS,
    scopes: READ,
    body: PLAN_DOCUMENT_SCHEMA,
    responses: { 200: { description: 'The changes', schema: openObject('See PlanDiff in shared/tracking-plan') } },
    handler: async (ctx) => {
      try {
        ctx.body = await diffPlan(ctx.state.em, ctx.deps.events, ctx.state.project.id, ctx.state.body);
      } catch (error) {
        if (error instanceof PlanInputError) throw validationError(error.message, error.attr);
        throw error;
      }
    },
  }),
  defineRoute({
    method: 'GET',
    path: `${P}/drop_rules`,
    summary: 'The drop rules of the plan in force (events dropped at capture by name, distinct id or property)',
    tags: TAGS,
    scopes: READ,
    responses: {
      200: {
        description: 'The rules',
        schema: record({ version: nullableInteger, drop_rules: PLAN_DOCUMENT_SCHEMA.properties.drop_rules }),
      },
    },
    handler: async (ctx) => {
      const row = await currentPlanVersion(ctx.state.em, ctx.state.project.id);
      ctx.body = { version: row?.version ?? null, drop_rules: (row?.document.drop_rules as unknown[]) ?? [] };
    },
  }),
  defineRoute({
    method: 'PUT',
    path: `${P}/drop_rules`,
    summary:
      'Replace the drop rules alone (a new plan version keeping the rest of the plan; without a plan, one with only these rules)',
    tags: TAGS,
    scopes: WRITE,
    body: {
      type: 'object',
      required: ['drop_rules'],
      additionalProperties: false,
      properties: { drop_rules: PLAN_DOCUMENT_SCHEMA.properties.drop_rules },
    },
    responses: { 200: { description: 'The new version', schema: versionSchema } },
    handler: async (ctx) => {
      const current = await currentPlanVersion(ctx.state.em, ctx.state.project.id);
      const document = { ...(current?.document ?? {}), drop_rules: ctx.state.body.drop_rules };
      ctx.body = serializeVersion(await replacePlan(ctx, document));
    },
  }),
  defineRoute({
    method: 'GET',
    path: `${P}/quarantine`,
    summary: 'Quarantined events, newest first, with their violations (kept QUARANTINE_RETENTION_DAYS)',
    tags: TAGS,
    scopes: READ,
    query: { type: 'object', properties: { ...PAGE_QUERY_PROPERTIES, ...quarantineFilterProperties } },
    responses: { 200: { description: 'A page of quarantined events', schema: paginatedSchema(quarantinedSchema) } },
    handler: async (ctx) => {
      const q = ctx.state.query;
      const page = pageOf(q);
      const found = await listQuarantine(
        ctx.state.em,
        ctx.state.project.id,
        { event: q.event, since: q.since === undefined ? undefined : new Date(q.since) },
        page,
      );
      ctx.body = paginated(
        ctx,
        page,
        found.count,
        found.rows.map((r) => ({
          uuid: r.uuid,
          event: r.event,
          distinct_id: r.distinct_id,
          properties: r.properties,
          timestamp: isoTimestamp(r.timestamp),
          violations: r.violations,
          plan_version: r.plan_version,
          quarantined_at: isoTimestamp(r.quarantined_at),
        })),
      );
    },
  }),
  defineRoute({
    method: 'POST',
    path: `${P}/quarantine/replay`,
    summary:
      'Replay quarantined events against the plan in force: those that pass are stored, each once, through the normal ingestion path; dry_run answers what would happen',
    tags: TAGS,
    scopes: WRITE,
    destructive: true,
    body: {
      type: 'object',
      properties: {
        ...quarantineFilterProperties,
        dry_run: {
          type: 'boolean',
          description: `Answer what a replay would do now (checked on the first ${DRY_RUN_SAMPLE} selected) and change nothing`,
        },
      },
    },
    headers: deletionWork.headers,
    responses: {
      200: { description: 'Replayed in the request (or a dry run)', schema: openObject() },
      202: {
        description: 'A large replay, queued for the worker: follow it at …/quarantine/replays/{id}/',
        schema: replaySchema,
      },
      ...deletionWork.responses,
    },
    handler: async (ctx) => {
      const { dry_run: dryRun, ...given } = ctx.state.body;
      const projectId = ctx.state.project.id;
      const filter = { event: given.event, since: given.since === undefined ? undefined : new Date(given.since) };
      if (dryRun) {
        const selected = await countQuarantine(ctx.state.em, projectId, filter);
        const checked = await replayDryRun(ctx.state.em, projectId, filter, DRY_RUN_SAMPLE);
        ctx.body = { dry_run: true, ...checked, selected, sampled: checked.selected < selected };
        return;
      }
      const key = idempotencyKeyOf(ctx, 'tracking_plan_replay');
      const inlineMax = ctx.deps.config.trackingPlan.replayInlineMax;
      const result = await answerOnce(ctx.state.em, projectId, key, async (tx) => {
        const selected = await countQuarantine(tx, projectId, filter);
        if (selected <= inlineMax) {
          const replay = await insertReplay(tx, projectId, given, ctx.state.auth.userId, 'running');
          const done = await replayAll(tx, projectId, filterOf(given, replay.created_at));
          return {
            answer: { status: 200, body: { id: replay.id, status: 'done', ...done.counts } },
            afterCommit: done.afterCommit,
          };
        }
        const replay = await insertReplay(tx, projectId, given, ctx.state.auth.userId, 'queued');
        return {
          answer: { status: 202, body: serializeReplay(replay) },
          // Never throws: with Redis away, the worker's reconciler enqueues it a minute or so later.
          afterCommit: () => enqueueReplay(ctx.deps.queues, replay.id),
        };
      });
      if (result === 'key_reused')
        throw new ApiError(
          422,
          'invalid_request',
          'idempotency_key_reused',
          'This Idempotency-Key was already used with a different request in the last 24 hours; use a new key.',
          'Idempotency-Key',
        );
      if (result.replayed) ctx.set('Idempotent-Replayed', 'true');
      ctx.status = result.status;
      ctx.body = result.body;
    },
  }),
  defineRoute({
    method: 'GET',
    path: `${P}/quarantine/replays/:id`,
    params: { id: { type: 'string', pattern: '^[0-9]{1,18}$', description: "The replay's id" } },
    summary: 'A replay: its status and what it did so far',
    tags: TAGS,
    scopes: READ,
    responses: { 200: { description: 'The replay', schema: replaySchema }, 404: { description: 'Not found' } },
    handler: async (ctx) => {
      const id = ctx.state.params.id;
      const row = /^[0-9]{1,18}$/.test(id) ? await findReplay(ctx.state.em, id, ctx.state.project.id) : null;
      if (!row) throw notFound();
      ctx.body = serializeReplay(row);
    },
  }),
];
