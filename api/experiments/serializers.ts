// The Experiment shape of the seed, from the rows shared/experiments/store.ts reads (flag, holdout,
// creator and saved-metric links joined in).
import type { HoldoutRow, SavedMetricRow } from '../../shared/experiments/index.ts';
import type { ExperimentRow } from '../../shared/experiments/index.ts';
import { isoTimestamp } from '../../shared/platform/time.ts';
import {
  anyJson,
  dateTime,
  nullableDateTime,
  nullableInteger,
  nullableOpenObject,
  nullableString,
  openObject,
  record,
  stringArray,
} from '../http/schemas.ts';
import { userBasicSchema } from '../users/serializers.ts';

const iso = (v: unknown) => isoTimestamp(v as string | null);

export function serializeExperiment(row: ExperimentRow) {
  const holdout = row.holdout && {
    ...row.holdout,
    created_at: iso(row.holdout.created_at),
    updated_at: iso(row.holdout.updated_at),
  };
  return {
    id: row.id,
    name: row.name,
    description: row.description,
    start_date: iso(row.start_date),
    end_date: iso(row.end_date),
    feature_flag_key: row.feature_flag.key,
    feature_flag: row.feature_flag,
    holdout,
    holdout_id: row.holdout_id,
    exposure_cohort: row.exposure_cohort_id,
    parameters: row.parameters,
    secondary_metrics: row.secondary_metrics,
    // Read back in the form it is written ([{id, metadata}]), never null: PostHog's agent toolkit
    // requires the key (an array or null), and a generated client's type wants one shape.
    saved_metrics_ids: row.saved_metrics.map((l) => ({ id: l.saved_metric, metadata: l.metadata })),
    saved_metrics: row.saved_metrics.map((l) => ({ ...l, created_at: iso(l.created_at) })),
    filters: row.filters,
    archived: row.archived,
    deleted: row.deleted,
    created_by: row.created_by,
    created_at: iso(row.created_at),
    updated_at: iso(row.updated_at),
    type: row.type,
    exposure_criteria: row.exposure_criteria,
    metrics: row.metrics,
    metrics_secondary: row.metrics_secondary,
    stats_config: row.stats_config,
    guardrail_status: row.guardrail_status ?? null,
    conclusion: row.conclusion,
    conclusion_comment: row.conclusion_comment,
    primary_metrics_ordered_uuids: row.primary_metrics_ordered_uuids,
    secondary_metrics_ordered_uuids: row.secondary_metrics_ordered_uuids,
    user_access_level: 'editor',
  };
}

export const featureFlagSchema = record({
  id: { type: 'integer' },
  team_id: { type: 'integer' },
  name: { type: 'string' },
  key: { type: 'string' },
  filters: openObject('Release conditions and variants (groups, multivariate, payloads …)'),
  deleted: { type: 'boolean' },
  active: { type: 'boolean' },
  ensure_experience_continuity: { type: 'boolean' },
  has_encrypted_payloads: { type: 'boolean' },
  version: { type: 'integer' },
  evaluation_runtime: { type: 'string' },
  evaluation_tags: stringArray,
});
export const holdoutSchema = record(
  {
    id: { type: 'integer' },
    name: { type: 'string' },
    description: nullableString,
    filters: { type: 'array', items: openObject('A group: rollout_percentage, properties, variant') },
    created_by: userBasicSchema,
    created_at: dateTime,
    updated_at: dateTime,
  },
  { nullable: true },
);
export const savedMetricLinkSchema = record({
  id: { type: 'integer' },
  experiment: { type: 'integer', description: 'Experiment id' },
  saved_metric: { type: 'integer', description: 'Saved metric id' },
  metadata: anyJson(),
  created_at: dateTime,
  query: openObject('The metric query (kind, metric_type …)'),
  name: { type: 'string' },
});
// Free-form lists: metrics and their orderings, stored as given.
const anyJsonArray = { type: ['array', 'null'], items: anyJson() };
export const experimentSchema = record({
  id: { type: 'integer' },
  name: { type: 'string' },
  description: nullableString,
  start_date: nullableDateTime,
  end_date: nullableDateTime,
  feature_flag_key: { type: 'string' },
  feature_flag: featureFlagSchema,
  holdout: holdoutSchema,
  holdout_id: nullableInteger,
  exposure_cohort: { ...nullableInteger, description: 'Cohort id' },
  parameters: nullableOpenObject(),
  secondary_metrics: anyJsonArray,
  saved_metrics_ids: {
    type: 'array',
    description: 'The linked saved metrics, in the form a create or update takes them',
    items: record({ id: { type: 'integer', description: 'Saved metric id' }, metadata: anyJson() }),
  },
  saved_metrics: { type: 'array', items: savedMetricLinkSchema },
  filters: nullableOpenObject(),
  archived: { type: 'boolean' },
  deleted: { type: 'boolean' },
  created_by: userBasicSchema,
  created_at: dateTime,
  updated_at: dateTime,
  type: { type: ['string', 'null'], enum: ['web', 'product', null] },
  exposure_criteria: nullableOpenObject(),
  metrics: anyJsonArray,
  metrics_secondary: anyJsonArray,
  stats_config: nullableOpenObject(),
  guardrail_status: nullableOpenObject(
    "The guardrail check's last verdict (state ok, inconclusive, harmful, tripped or reset; last_check, whose checks say within_tolerance, inconclusive with needed_per_arm, harmful, not_enough_exposures or no_data) and the circuit breaker's trip (when, why, the interval) — null until first checked",
  ),
  conclusion: { type: ['string', 'null'], enum: ['won', 'lost', 'inconclusive', 'stopped_early', 'invalid', null] },
  conclusion_comment: nullableString,
  primary_metrics_ordered_uuids: anyJsonArray,
  secondary_metrics_ordered_uuids: anyJsonArray,
  user_access_level: { type: 'string' },
});

/** The fields holdouts and saved metrics share. */
export const sideRowBase = (row: HoldoutRow | SavedMetricRow) => ({
  id: row.id,
  name: row.name,
  description: row.description,
  created_by: row.created_by,
  created_at: iso(row.created_at),
  updated_at: iso(row.updated_at),
});
export const sideRowBaseSchema = {
  id: { type: 'integer' },
  name: { type: 'string' },
  description: nullableString,
  created_by: userBasicSchema,
  created_at: dateTime,
  updated_at: dateTime,
};
