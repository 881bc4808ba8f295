import { defineEntity, p } from '@mikro-orm/core';
import { Person } from './person.ts';
import { Project } from './project.ts';
import { User } from './user.ts';

/** A feature flag; its key is unique among the project's flags not deleted. */
export const FeatureFlag = defineEntity({
  name: 'FeatureFlag',
  tableName: 'feature_flag',
  properties: {
    id: p.integer().primary().autoincrement(),
    projectId: () => p.manyToOne(Project).mapToPk().fieldName('project_id').deleteRule('cascade'),
    key: p.string().length(400),
    name: p.text().default(''),
    filters: p.json<Record<string, unknown>>().defaultRaw(`'{}'`),
    active: p.boolean().default(true),
    deleted: p.boolean().default(false),
    ensureExperienceContinuity: p.boolean().default(false),
    hasEncryptedPayloads: p.boolean().default(false),
    version: p.integer().default(1),
    evaluationRuntime: p.string().length(10).default('all'),
    evaluationTags: p.array().defaultRaw(`'{}'`),
    createdById: () => p.manyToOne(User).mapToPk().nullable().fieldName('created_by_id').deleteRule('set null'),
    createdAt: p.datetime().defaultRaw('now()'),
    updatedAt: p.datetime().defaultRaw('now()'),
  },
  uniques: [{ name: 'feature_flag_project_key_idx', properties: ['projectId', 'key'], where: 'not deleted' }],
});

/**
 * Experience continuity: a flag with ensure_experience_continuity keeps bucketing an identified person
 * by the anonymous id it was first evaluated with.
 */
export const FeatureFlagHashKeyOverride = defineEntity({
  name: 'FeatureFlagHashKeyOverride',
  tableName: 'feature_flag_hash_key_override',
  properties: {
    id: p.bigint('string').primary().autoincrement(),
    projectId: () => p.manyToOne(Project).mapToPk().fieldName('project_id').deleteRule('cascade'),
    personId: () => p.manyToOne(Person).mapToPk().fieldName('person_id').deleteRule('cascade'),
    featureFlagKey: p.string().length(400),
    hashKey: p.string().length(400),
  },
  uniques: [{ properties: ['projectId', 'personId', 'featureFlagKey'] }],
});

/**
 * The variant a flag whose experiment allocates adaptively first served a bucketing value (distinct
 * id, or the continuity hash key): served again whatever the rollout percentages are now.
 */
export const FeatureFlagStickyVariant = defineEntity({
  name: 'FeatureFlagStickyVariant',
  tableName: 'feature_flag_sticky_variant',
  properties: {
    featureFlagId: () =>
      p
        .manyToOne(FeatureFlag)
        .mapToPk()
        .primary()
        .fieldName('feature_flag_id')
        .deleteRule('cascade')
        .updateRule('no action'),
    bucketingValue: p.string().length(400).primary(),
    projectId: () => p.manyToOne(Project).mapToPk().fieldName('project_id').deleteRule('cascade'),
    variant: p.string().length(400),
    assignedAt: p.datetime().defaultRaw('now()'),
  },
  indexes: [{ name: 'feature_flag_sticky_variant_project_idx', properties: ['projectId', 'bucketingValue'] }],
});
