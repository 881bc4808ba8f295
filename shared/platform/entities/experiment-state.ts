import { defineEntity, p } from '@mikro-orm/core';
import { Experiment } from './experiment.ts';

/**
 * Which day's end a metric's per-person state (ExperimentPersonState) is as of, and for which
 * fingerprint of the metric: the daily results run continues it only from that stored day.
 */
export const ExperimentMetricState = defineEntity({
  name: 'ExperimentMetricState',
  tableName: 'experiment_metric_state',
  properties: {
    experimentId: () => p.manyToOne(Experiment).mapToPk().primary().fieldName('experiment_id').deleteRule('cascade'),
    metricUuid: p.string().length(200).primary(),
    fingerprint: p.string().length(64),
    day: p.date(),
    updatedAt: p.datetime().defaultRaw('now()'),
  },
});

/**
 * An exposed person's state for one experiment metric, as of the end of its ExperimentMetricState day
 * (shared/experiments/results.ts): the variant first exposed to and when, when they were first exposed
 * to a second variant (then they count nowhere from that day), the running value (a mean metric's sum
 * of values since the first exposure), the funnel steps' times (epoch microseconds, the steps reached,
 * in order) and CUPED's covariate (the value, or 0/1 for a funnel, of the days before the exposure).
 */
export const ExperimentPersonState = defineEntity({
  name: 'ExperimentPersonState',
  tableName: 'experiment_person_state',
  properties: {
    experimentId: () => p.manyToOne(Experiment).mapToPk().primary().fieldName('experiment_id').deleteRule('cascade'),
    metricUuid: p.string().length(200).primary(),
    personId: p.bigint('string').primary(),
    variant: p.text(),
    firstExposedAt: p.datetime(),
    leftAt: p.datetime().nullable(),
    value: p.double().defaultRaw('0'),
    /** A ratio metric's denominator (value holds its numerator). */
    denominator: p.double().defaultRaw('0'),
    covariate: p.double().defaultRaw('0'),
    steps: p.json<number[]>().nullable(),
  },
});

/**
 * A bandit experiment's last allocation run (result: probabilities, weights, the period-weighted
 * estimate) and its reallocations (history: when, weights before and after), shared/experiments/bandit-job.ts.
 */
export const ExperimentBandit = defineEntity({
  name: 'ExperimentBandit',
  tableName: 'experiment_bandit',
  properties: {
    experimentId: () =>
      p
        .manyToOne(Experiment)
        .mapToPk()
        .primary()
        .fieldName('experiment_id')
        .deleteRule('cascade')
        .updateRule('no action'),
    checkedAt: p.datetime(),
    result: p.json<Record<string, unknown>>(),
    history: p.json<Record<string, unknown>[]>().defaultRaw(`'[]'`),
    updatedAt: p.datetime().defaultRaw('now()'),
  },
});
