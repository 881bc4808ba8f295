// Access exports (shared/access-exports): a person's data handed to them as one signed .tar.gz. The
// request (202), its dry run (per-store counts, nothing written), its status with the signed manifest,
// and the archive's download (streamed from disk) — each creation and download recorded in the
// persons' read-access log.
import { createReadStream } from 'node:fs';
import { BIGINT_ID_PATTERN } from '../../shared/platform/ids.ts';
import {
  ACCESS_EXPORT_MAX_IDS,
  ACCESS_EXPORT_STATUSES,
  archiveFolder,
  exportArchive,
  exportById,
  exportPersons,
  exportView,
  NoPersonsFound,
  previewAccessExport,
  recordExportDownload,
  requestAccessExport,
  type AccessRequester,
} from '../../shared/access-exports/index.ts';
import { conflict, gone, notFound, validationError } from '../http/errors.ts';
import { actorOf, defineRoute, type ApiContext } from '../http/routes.ts';
import {
  dateTime,
  nullableDateTime,
  nullableInteger,
  nullableOpenObject,
  nullableString,
  record,
  stringArray,
} from '../http/schemas.ts';
import { deletionWork, idempotencyKeyOf, keyReused } from '../persons/deletion-requests.ts';

const A = '/api/projects/:project_id/persons/access_exports';
const EXPORT_ID = {
  id: { type: 'string', pattern: BIGINT_ID_PATTERN, description: "The access export's id" },
} as const;

const count = { type: 'integer', minimum: 0 } as const;
export const accessExportSchema = record({
  id: { type: 'string' },
  project_id: { type: 'integer' },
  status: {
    enum: [...ACCESS_EXPORT_STATUSES],
    description: 'pending → running → completed (downloadable until expires_at) → expired (archive removed); or failed',
  },
  person_uuids: stringArray,
  distinct_ids: { ...stringArray, description: "The persons' distinct ids when the request was made" },
  request: {
    ...record({ ids: stringArray, distinct_ids: stringArray }),
    description: 'The ids and distinct ids as asked',
  },
  requested_by: record({ user_id: nullableInteger, api_key_id: nullableString }),
  cutoff: { ...dateTime, description: 'Events that had arrived by then are exported' },
  created_at: dateTime,
  started_at: nullableDateTime,
  completed_at: nullableDateTime,
  expires_at: {
    ...nullableDateTime,
    description: 'When the archive is removed (ACCESS_EXPORT_TTL_HOURS after completion)',
  },
  removed_at: { ...nullableDateTime, description: 'When the expiry job removed the archive' },
  attempts: count,
  last_error: nullableString,
  size_bytes: { ...nullableInteger, description: "The archive's size" },
  manifest_sha256: {
    ...nullableString,
    description: 'SHA-256 of the archive’s manifest.json; later deletion receipts of the persons cite it',
  },
  key_id: {
    ...nullableString,
    description: 'The receipts key that signed manifest.json (…/deletion_receipts/public_key)',
  },
  signature: {
    ...nullableString,
    description: 'Base64 of the Ed25519 signature of manifest.json (the archive’s manifest.sig)',
  },
  manifest: nullableOpenObject(
    'manifest.json as signed: per file its name, rows, bytes and SHA-256; the request, its cutoff and times',
  ),
});

const dryRunSchema = record(
  {
    dry_run: { const: true },
    persons_found: count,
    would_export: record(
      {
        postgres: record({
          persons: count,
          distinct_ids: count,
          events: count,
          recordings: count,
          cohort_memberships: count,
          flag_hash_key_overrides: count,
          access_log_entries: count,
        }),
        clickhouse: record({ events: count }),
      },
      { optional: ['clickhouse'] },
    ),
  },
  {},
);

const idItems = { type: ['string', 'integer'], format: 'int64', maxLength: 400 } as const;

/** Who asks, as the read-access log records it. */
const requesterOf = (ctx: ApiContext): AccessRequester => ({
  ...actorOf(ctx),
  requestId: typeof ctx.state.requestId === 'string' ? ctx.state.requestId : null,
  clientAddress: ctx.request.ip || null,
});

export const accessExportRoutes = [
  defineRoute({
    method: 'POST',
    path: A,
    summary:
      "Export persons' data (right of access): one signed .tar.gz per request, built by the worker; dry_run=true answers what it would hold, per store",
    tags: ['persons'],
    scopes: ['person:write'],
    destructive: true,
    query: {
      type: 'object',
      properties: {
        dry_run: {
          type: 'boolean',
          description:
            'Answer what the export would hold now, per store (PostgreSQL, and ClickHouse when it is the event store); nothing is written',
        },
      },
    },
    body: {
      type: 'object',
      properties: {
        ids: { type: 'array', items: idItems, description: "Persons' ids or uuids (as bulk_delete takes them)" },
        distinct_ids: {
          type: 'array',
          items: idItems,
          description: `Distinct ids; their persons are exported (at most ${ACCESS_EXPORT_MAX_IDS})`,
        },
      },
    },
    headers: deletionWork.headers,
    responses: {
      ...deletionWork.responses,
      200: { description: 'dry_run=true: what the export would hold now', schema: dryRunSchema },
      202: {
        description: 'The export request (pending); GET it for its status and manifest',
        schema: accessExportSchema,
      },
      404: { description: 'No person matches the ids or distinct ids' },
    },
    handler: async (ctx) => {
      const { body, query } = ctx.state;
      const ids = (body.ids ?? []).map(String);
      const distinctIds = (body.distinct_ids ?? []).map(String);
      if (distinctIds.length > ACCESS_EXPORT_MAX_IDS)
        throw validationError(`You can only pass ${ACCESS_EXPORT_MAX_IDS} distinct_ids in one call`, 'distinct_ids');
      if (ids.length > ACCESS_EXPORT_MAX_IDS)
        throw validationError(`You can only pass ${ACCESS_EXPORT_MAX_IDS} ids in one call`, 'ids');
      if (!ids.length && !distinctIds.length) throw validationError('You need to specify either distinct_ids or ids');
      const projectId = ctx.state.project.id;
      if (query.dry_run === true) {
        const persons = await exportPersons(ctx.state.em, projectId, ids, distinctIds);
        ctx.body = await previewAccessExport(ctx.state.em, ctx.deps.events, projectId, persons);
        return;
      }
      const key = idempotencyKeyOf(ctx, 'access_export');
      let result: Awaited<ReturnType<typeof requestAccessExport>>;
      try {
        result = await requestAccessExport(ctx.state.em, requesterOf(ctx), key, { ids, distinctIds }, ctx.deps.queues);
      } catch (error) {
        if (error instanceof NoPersonsFound) throw notFound(error.message);
        throw error;
      }
      if (result === 'key_reused') throw keyReused();
      if (result.replayed) ctx.set('Idempotent-Replayed', 'true');
      ctx.status = result.status;
      ctx.body = result.body;
    },
  }),
  defineRoute({
    method: 'GET',
    path: `${A}/:id`,
    params: EXPORT_ID,
    summary: "An access export's status and, once built, its signed manifest",
    tags: ['persons'],
    scopes: ['person:read'],
    responses: {
      200: { description: 'The export', schema: accessExportSchema },
      404: { description: 'No such export in this project' },
    },
    handler: async (ctx) => {
      const found = await exportById(ctx.state.em, ctx.state.project.id, ctx.state.params.id);
      if (!found) throw notFound();
      ctx.body = exportView(found);
    },
  }),
  defineRoute({
    method: 'GET',
    path: `${A}/:id/download`,
    params: EXPORT_ID,
    summary:
      "The export's archive (.tar.gz), streamed from disk; each download is recorded in the persons' read-access log",
    tags: ['persons'],
    scopes: ['person:read'],
    responses: {
      200: { description: 'The archive', contentType: 'application/gzip' },
      404: { description: 'No such export in this project' },
      409: { description: 'Not built yet (pending or running), or failed' },
      410: { description: 'Expired: the archive was removed (removed_at)' },
    },
    handler: async (ctx) => {
      const projectId = ctx.state.project.id;
      const found = await exportById(ctx.state.em, projectId, ctx.state.params.id);
      if (!found) throw notFound();
      const view = exportView(found);
      if (view.status === 'expired')
        throw gone(
          `Access export ${view.id} expired at ${view.expires_at}; its archive was removed at ${view.removed_at}. Request a new export.`,
        );
      const archive = view.status === 'completed' ? await exportArchive(ctx.state.em, projectId, view.id) : null;
      if (!archive)
        throw conflict(`Access export ${view.id} is ${view.status}; only a completed export can be downloaded.`);
      await recordExportDownload(ctx.state.em, requesterOf(ctx), view);
      ctx.status = 200;
      ctx.type = 'application/gzip';
      ctx.set('Content-Disposition', `attachment; filename="${archiveFolder(view.id)}.tar.gz"`);
      ctx.body = createReadStream(archive.path);
      ctx.length = archive.size;
    },
  }),
];
