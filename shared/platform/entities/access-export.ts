import { defineEntity, p } from '@mikro-orm/core';
import { Project } from './project.ts';
import { User } from './user.ts';

/** A request for persons' data, built by the worker into one signed .tar.gz (shared/access-exports). */
export const AccessExport = defineEntity({
  name: 'AccessExport',
  tableName: 'access_export',
  properties: {
    id: p.bigint('string').primary().autoincrement(),
    projectId: () => p.manyToOne(Project).mapToPk().fieldName('project_id').deleteRule('cascade'),
    createdById: () => p.manyToOne(User).mapToPk().nullable().fieldName('created_by_id').deleteRule('set null'),
    apiKeyId: p.string().length(50).nullable(),
    /** pending, running, completed, failed or expired (its archive removed). */
    status: p.string().length(20).default('pending'),
    personUuids: p.array().columnType('uuid[]'),
    personIds: p.array().columnType('bigint[]'),
    distinctIds: p.array().columnType('text[]'),
    /** What was asked: the ids and distinct ids as sent. */
    request: p.json<Record<string, unknown>>().defaultRaw(`'{}'`),
    /** Only data that existed at this moment is exported. */
    cutoff: p.datetime().defaultRaw('now()'),
    createdAt: p.datetime().defaultRaw('now()'),
    startedAt: p.datetime().nullable(),
    completedAt: p.datetime().nullable(),
    expiresAt: p.datetime().nullable(),
    removedAt: p.datetime().nullable(),
    attempts: p.integer().default(0),
    lastError: p.text().nullable(),
    filePath: p.text().nullable(),
    sizeBytes: p.bigint('string').nullable(),
    manifest: p.json<Record<string, unknown>>().nullable(),
    manifestSha256: p.string().length(64).nullable(),
    signature: p.text().nullable(),
    keyId: p.string().length(64).nullable(),
  },
  indexes: [
    {
      name: 'access_export_project_idx',
      columns: [{ name: 'project_id' }, { name: 'created_at', sort: 'desc' }],
    },
    { name: 'access_export_uuids_idx', properties: ['personUuids'], type: 'gin' },
    { name: 'access_export_expiry_idx', properties: ['expiresAt'], where: `status = 'completed'` },
    { name: 'access_export_pending_idx', properties: ['createdAt'], where: `status in ('pending', 'running')` },
  ],
});
