import { defineEntity, p } from '@mikro-orm/core';

/**
 * The signed receipt of a verified deletion request (shared/deletions/receipts.ts): `body` is its
 * content, signed in canonical form (sorted keys, no whitespace) with the key `keyId`. No foreign keys:
 * it outlives the person, the request row and the key's private half.
 */
export const DeletionReceipt = defineEntity({
  name: 'DeletionReceipt',
  tableName: 'deletion_receipt',
  properties: {
    id: p.bigint('string').primary().autoincrement(),
    requestId: p.bigint('string').unique('deletion_receipt_request_id_unique'),
    projectId: p.integer(),
    body: p.json<Record<string, unknown>>(),
    /** Base64 of the Ed25519 signature. */
    signature: p.text(),
    keyId: p.string().length(64),
    createdAt: p.datetime().defaultRaw('now()'),
  },
  indexes: [
    {
      name: 'deletion_receipt_project_idx',
      columns: [{ name: 'project_id' }, { name: 'created_at', sort: 'desc' }, { name: 'request_id', sort: 'desc' }],
    },
  ],
});

/** A key that signs or signed receipts; `privateKey` only for a generated one still in use. */
export const DeletionReceiptKey = defineEntity({
  name: 'DeletionReceiptKey',
  tableName: 'deletion_receipt_key',
  properties: {
    id: p.string().length(64).primary(),
    publicKey: p.text(),
    privateKey: p.text().nullable(),
    createdAt: p.datetime().defaultRaw('now()'),
    retiredAt: p.datetime().nullable(),
  },
});
