import { defineEntity, p, Type, type InferEntity } from '@mikro-orm/core';
import { User } from './user.ts';

/** A timestamptz read as PostgreSQL prints it (MikroORM's driver hands the text over unparsed): microseconds kept. */
class TimestampText extends Type<string, string> {
  override getColumnType() {
    return 'timestamptz';
  }

  override compareAsType() {
    return 'string';
  }

  override get runtimeType() {
    return 'string';
  }
}

/**
 * A deletion request (PostHog's AsyncDeletion): written in the same transaction as the API change; the
 * worker's job carries only its id. `cutoff` bounds the deletion to data that existed when it was asked
 * for. It is read as PostgreSQL prints it (a string), not as a Date: a Date drops its microseconds, so
 * events of the cutoff's last millisecond would be neither deleted nor counted as survivors.
 */
export const AsyncDeletion = defineEntity({
  name: 'AsyncDeletion',
  tableName: 'async_deletion',
  properties: {
    id: p.bigint('string').primary().autoincrement(),
    projectId: p.integer(),
    deletionType: p.string().length(40),
    key: p.string().length(400),
    mode: p.string().length(20),
    distinctIds: p.array().nullable(),
    createdById: () => p.manyToOne(User).mapToPk().nullable().fieldName('created_by_id').deleteRule('set null'),
    createdAt: p.datetime().defaultRaw('now()'),
    cutoff: p.type(TimestampText).defaultRaw('now()'),
    /** pending, running, completed or failed. */
    status: p.string().length(20).default('pending'),
    attempts: p.integer().default(0),
    rowsDeleted: p.bigint('string').defaultRaw('0'),
    lastError: p.text().nullable(),
    startedAt: p.datetime().nullable(),
    deleteVerifiedAt: p.datetime().nullable(),
    /** When a scheduled (weekly / off-peak) request was handed to the worker by its batch. */
    releasedAt: p.datetime().nullable(),
    /** A running request's claim, renewed per chunk; past it another worker may claim the request. */
    leaseUntil: p.datetime().nullable(),
    finishedAt: p.datetime().nullable(),
    /** The request whose job is processing this one (event deletions are batched per project). */
    claimedBy: p.bigint('string').nullable(),
    failures: p.integer().default(0),
    /** A failed request is tried again from then on. */
    nextAttemptAt: p.datetime().nullable(),
    /** What its receipt needs that the row does not otherwise hold (shared/deletions/receipts.ts). */
    receiptBasis: p.json<Record<string, unknown>>().nullable(),
  },
  indexes: [
    { name: 'async_deletion_pending_idx', properties: ['mode', 'createdAt'], where: 'delete_verified_at is null' },
    {
      name: 'async_deletion_project_idx',
      columns: [{ name: 'project_id' }, { name: 'created_at', sort: 'desc' }],
    },
    { name: 'async_deletion_retry_idx', properties: ['nextAttemptAt'], where: `status = 'failed'` },
  ],
  uniques: [
    // Only a pending request takes in a repeated one.
    {
      name: 'async_deletion_one_pending',
      properties: ['projectId', 'deletionType', 'key', 'mode'],
      where: `status = 'pending'`,
    },
  ],
});

export type AsyncDeletionRow = InferEntity<typeof AsyncDeletion>;
