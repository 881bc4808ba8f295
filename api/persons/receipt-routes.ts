// Deletion receipts: the signed record of each verified deletion request, and the public keys that
// verify them (shared/deletions/receipts.ts).
import { notFound } from '../http/errors.ts';
import { PAGE_QUERY_PROPERTIES, pageOf, paginated, paginatedSchema } from '../http/pagination.ts';
import { defineRoute } from '../http/routes.ts';
import { dateTime, nullableDateTime, nullableInteger, nullableString, record, stringArray } from '../http/schemas.ts';
import { csvOfAnswer, FORMAT_QUERY } from './csv.ts';
import { DELETION_REQUEST_ID } from './deletion-requests.ts';
import {
  deletionReceipt,
  listDeletionReceipts,
  RECEIPT_ALGORITHM,
  receiptKeys,
  receiptSigner,
} from '../../shared/deletions/index.ts';

const R = '/api/projects/:project_id/persons/deletion_receipts';
// One CSV row per receipt, its content flattened (receipt.stores.events.before, …).
const CSV = csvOfAnswer();

const storeSchema = record({
  before: { ...nullableInteger, description: 'Rows found before anything was deleted' },
  after: { type: 'integer', description: 'Rows found at verification (always 0)' },
  verified_by: { type: 'string', description: 'The statement that counted `after`, its parameters named' },
});

/** The signed content (receipt_version 1). */
const receiptBodySchema = record(
  {
    receipt_version: { type: 'integer' },
    algorithm: { const: RECEIPT_ALGORITHM },
    key_id: { type: 'string' },
    request_id: DELETION_REQUEST_ID,
    project_id: { type: 'integer' },
    person_uuid: { type: 'string' },
    distinct_ids: stringArray,
    deletion_type: { enum: ['person_events', 'person_recordings'] },
    mode: { enum: ['weekly', 'off_peak', 'immediate'] },
    cutoff: dateTime,
    requested_by: record({
      user_id: nullableInteger,
      email: nullableString,
      api_key_id: nullableString,
      api_key_label: nullableString,
    }),
    accepted_at: dateTime,
    started_at: nullableDateTime,
    verified_at: dateTime,
    stores: {
      type: 'object',
      description:
        'Per store the request covers: persons, distinct_ids, cohort_memberships, flag_hash_key_overrides (when it deleted the person), events and quarantined_events (what a tracking plan held of its distinct ids), or recordings and recording_snapshots',
      additionalProperties: storeSchema,
    },
    access_exports: {
      type: 'array',
      description:
        "The person's access exports before the deletion (present only when there were any): each archive's manifest.json SHA-256, so what was handed out can be checked against what was deleted",
      items: record({
        export_id: { type: 'string' },
        manifest_sha256: { type: 'string', pattern: '^[0-9a-f]{64}$' },
        built_at: dateTime,
      }),
    },
  },
  { optional: ['access_exports'] },
);

const receiptSchema = record({
  request_id: DELETION_REQUEST_ID,
  project_id: { type: 'integer' },
  person_uuid: { type: 'string' },
  created_at: dateTime,
  algorithm: { const: RECEIPT_ALGORITHM },
  key_id: { type: 'string', description: 'The id of the public key that verifies it (see public_key/)' },
  signature: { type: 'string', description: 'Base64 of the Ed25519 signature of signed_content' },
  signed_content: {
    type: 'string',
    description: 'The receipt in canonical form (JSON, keys sorted, no whitespace): exactly the bytes signed',
  },
  receipt: { ...receiptBodySchema, description: 'The same content as a JSON object' },
});

const keySchema = record({
  key_id: { type: 'string' },
  algorithm: { const: RECEIPT_ALGORITHM },
  public_key: { type: 'string', description: 'PEM (SubjectPublicKeyInfo)' },
  created_at: dateTime,
  retired_at: nullableDateTime,
});

export const deletionReceiptRoutes = [
  defineRoute({
    method: 'GET',
    path: R,
    summary: 'Signed receipts of the verified deletion requests of this project, newest first',
    tags: ['persons'],
    scopes: ['person:read'],
    query: {
      type: 'object',
      properties: { ...PAGE_QUERY_PROPERTIES, ...FORMAT_QUERY, person_uuid: { type: 'string', format: 'uuid' } },
    },
    responses: { 200: { description: 'A page of receipts', schema: paginatedSchema(receiptSchema) } },
    csv: CSV,
    handler: async (ctx) => {
      const page = pageOf(ctx.state.query);
      const filter = { projectId: ctx.state.project.id, personUuid: ctx.state.query.person_uuid };
      const { count, results } = await listDeletionReceipts(ctx.state.em, filter, page);
      ctx.body = paginated(ctx, page, count, results);
    },
  }),
  defineRoute({
    method: 'GET',
    path: `${R}/public_key`,
    summary: 'The public key that signs deletion receipts now, and every key that signed one (by key id)',
    tags: ['persons'],
    scopes: ['person:read'],
    responses: {
      200: {
        description: 'The current key and all keys',
        schema: record({ ...keySchema.properties, keys: { type: 'array', items: keySchema } }),
      },
    },
    handler: async (ctx) => {
      const signer = await receiptSigner(ctx.state.em, ctx.deps.config.deletion.receiptPrivateKey);
      const keys = await receiptKeys(ctx.state.em);
      const current = keys.find((k) => k.key_id === signer.keyId)!;
      ctx.body = { ...current, keys };
    },
  }),
  defineRoute({
    method: 'GET',
    path: `${R}/:request_id`,
    params: { request_id: DELETION_REQUEST_ID },
    summary: 'The signed receipt of a verified deletion request (format=csv: one row)',
    tags: ['persons'],
    scopes: ['person:read'],
    query: { type: 'object', properties: { ...FORMAT_QUERY } },
    responses: { 200: { description: 'The receipt', schema: receiptSchema } },
    csv: CSV,
    handler: async (ctx) => {
      const id = ctx.state.params.request_id;
      const found = await deletionReceipt(ctx.state.em, ctx.state.project.id, id);
      if (!found) throw notFound();
      ctx.body = found;
    },
  }),
];
