import { defineEntity, p } from '@mikro-orm/core';
import { Project } from './project.ts';
import { User } from './user.ts';

/**
 * The first answer to a request that created deletion work under an Idempotency-Key, per project,
 * user and key (two users' equal keys are two keys), kept 24 hours (expired rows are purged by the
 * daily off-peak deletion job). `fingerprint` is the sha256 of the request (route, person, query,
 * body): the same key with another request is a 422.
 */
export const DeletionIdempotencyKey = defineEntity({
  name: 'DeletionIdempotencyKey',
  tableName: 'deletion_idempotency_key',
  properties: {
    projectId: () => p.manyToOne(Project).mapToPk().primary().fieldName('project_id').deleteRule('cascade'),
    userId: () => p.manyToOne(User).mapToPk().primary().fieldName('user_id').deleteRule('cascade'),
    key: p.string().length(255).primary(),
    fingerprint: p.string().length(64),
    /** null only inside the transaction that is still answering. */
    responseStatus: p.smallint().nullable(),
    responseBody: p.json<unknown>().nullable(),
    createdAt: p.datetime().defaultRaw('now()'),
    expiresAt: p.datetime().index('deletion_idempotency_key_expires_idx'),
  },
});
