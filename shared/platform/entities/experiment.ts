import { defineEntity, p } from '@mikro-orm/core';
import { Cohort } from './cohort.ts';
import { FeatureFlag } from './feature-flag.ts';
import { Project } from './project.ts';
import { User } from './user.ts';

/** A holdout group: persons kept out of the experiments that use it. */
export const ExperimentHoldout = defineEntity({
  name: 'ExperimentHoldout',
  tableName: 'experiment_holdout',
  properties: {
    id: p.integer().primary().autoincrement(),
    projectId: () => p.manyToOne(Project).mapToPk().fieldName('project_id').deleteRule('cascade'),
    name: p.string().length(400),
    description: p.string().length(400).nullable(),
    filters: p.json<unknown[]>().defaultRaw(`'[]'`),
    createdById: () => p.manyToOne(User).mapToPk().nullable().fieldName('created_by_id').deleteRule('set null'),
    createdAt: p.datetime().defaultRaw('now()'),
    updatedAt: p.datetime().defaultRaw('now()'),
  },
});

/** A metric saved for reuse across experiments. */
export const ExperimentSavedMetric = defineEntity({
  name: 'ExperimentSavedMetric',
  tableName: 'experiment_saved_metric',
  properties: {
    id: p.integer().primary().autoincrement(),
    projectId: () => p.manyToOne(Project).mapToPk().fieldName('project_id').deleteRule('cascade'),
    name: p.string().length(400),
    description: p.string().length(400).nullable(),
    query: p.json<Record<string, unknown>>(),
    tags: p.array().defaultRaw(`'{}'`),
    createdById: () => p.manyToOne(User).mapToPk().nullable().fieldName('created_by_id').deleteRule('set null'),
    createdAt: p.datetime().defaultRaw('now()'),
    updatedAt: p.datetime().defaultRaw('now()'),
  },
});

/** An experiment on its feature flag (which it keeps: the flag has no delete rule). */
export const Experiment = defineEntity({
  name: 'Experiment',
  tableName: 'experiment',
  properties: {
    id: p.integer().primary().autoincrement(),
    projectId: () => p.manyToOne(Project).mapToPk().fieldName('project_id').deleteRule('cascade'),
    name: p.string().length(400),
    description: p.text().nullable(),
    filters: p.json<Record<string, unknown>>().defaultRaw(`'{}'`),
    parameters: p.json<Record<string, unknown>>().nullable(),
    secondaryMetrics: p.json<unknown[]>().defaultRaw(`'[]'`),
    createdById: () => p.manyToOne(User).mapToPk().nullable().fieldName('created_by_id').deleteRule('set null'),
    featureFlagId: () => p.manyToOne(FeatureFlag).mapToPk().fieldName('feature_flag_id'),
    exposureCohortId: () =>
      p.manyToOne(Cohort).mapToPk().nullable().fieldName('exposure_cohort_id').deleteRule('set null'),
    holdoutId: () => p.manyToOne(ExperimentHoldout).mapToPk().nullable().fieldName('holdout_id').deleteRule('set null'),
    startDate: p.datetime().nullable(),
    endDate: p.datetime().nullable(),
    createdAt: p.datetime().defaultRaw('now()'),
    updatedAt: p.datetime().defaultRaw('now()'),
    archived: p.boolean().default(false),
    deleted: p.boolean().default(false),
    type: p.string().length(40).nullable().default('product'),
    exposureCriteria: p.json<Record<string, unknown>>().nullable().defaultRaw(`'{}'`),
    metrics: p.json<unknown[]>().nullable().defaultRaw(`'[]'`),
    metricsSecondary: p.json<unknown[]>().nullable().defaultRaw(`'[]'`),
    statsConfig: p.json<Record<string, unknown>>().nullable().defaultRaw(`'{}'`),
    conclusion: p.string().length(30).nullable(),
    conclusionComment: p.text().nullable(),
    primaryMetricsOrderedUuids: p.json<string[]>().nullable(),
    secondaryMetricsOrderedUuids: p.json<string[]>().nullable(),
    createInFolder: p.text().nullable(),
    /** The guardrail check's last verdict and the circuit breaker's trip (shared/experiments/guardrails.ts). */
    guardrailStatus: p.json<Record<string, unknown>>().nullable(),
  },
  indexes: [
    {
      name: 'experiment_project_idx',
      columns: [{ name: 'project_id' }, { name: 'created_at', sort: 'desc' }],
      where: 'not deleted',
    },
  ],
});

/** A saved metric used by an experiment (`metadata.type`: primary or secondary). */
export const ExperimentToSavedMetric = defineEntity({
  name: 'ExperimentToSavedMetric',
  tableName: 'experiment_to_saved_metric',
  properties: {
    id: p.integer().primary().autoincrement(),
    experimentId: () => p.manyToOne(Experiment).mapToPk().fieldName('experiment_id').deleteRule('cascade'),
    savedMetricId: () =>
      p.manyToOne(ExperimentSavedMetric).mapToPk().fieldName('saved_metric_id').deleteRule('cascade'),
    metadata: p.json<Record<string, unknown>>().defaultRaw(`'{}'`),
    createdAt: p.datetime().defaultRaw('now()'),
  },
  indexes: [{ name: 'experiment_to_saved_metric_experiment_idx', properties: ['experimentId'] }],
});

/** A metric's computed result for one day (the worker's experiment-results job). */
export const ExperimentMetricResult = defineEntity({
  name: 'ExperimentMetricResult',
  tableName: 'experiment_metric_result',
  properties: {
    id: p.integer().primary().autoincrement(),
    experimentId: () => p.manyToOne(Experiment).mapToPk().fieldName('experiment_id').deleteRule('cascade'),
    metricUuid: p.string().length(200),
    fingerprint: p.string().length(64),
    day: p.date(),
    status: p.string().length(20),
    result: p.json<Record<string, unknown>>().nullable(),
    errorMessage: p.text().nullable(),
    computedAt: p.datetime().nullable(),
    createdAt: p.datetime().defaultRaw('now()'),
    updatedAt: p.datetime().defaultRaw('now()'),
  },
  uniques: [{ properties: ['experimentId', 'metricUuid', 'fingerprint', 'day'] }],
});
