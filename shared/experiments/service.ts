// Creating and changing experiments with PostHog's rules: flag reuse or creation, draft vs launched,
// allowed keys, variant and holdout freezes, saved-metric links, metric fingerprints. Bad input is an
// ExperimentInputError (the API answers it as a 400 validation error).
import type { EntityManager } from '@mikro-orm/postgresql';
import { randomUUID } from 'node:crypto';
import { recordActivity, type Actor } from '../platform/activity-log.ts';
import { metricFingerprint } from './fingerprint.ts';
import { SEQUENTIAL_METRIC_TYPES, sequentialConfig } from './sequential.ts';
import { correctionConfig, cupedLookbackDays } from './stats.ts';
import { guardrailsOf, resetCircuitBreaker } from './guardrails.ts';
import { metricShape } from './results.ts';
import { allocationProblem } from './bandit.ts';
import {
  deleteHoldout,
  findSavedMetric,
  type HoldoutFields,
  holdoutFilters as storedHoldoutFilters,
  insertHoldout,
  type SavedMetricFields,
  setHoldoutGroups,
  updateHoldout,
} from './holdout-and-metric-store.ts';
import {
  createExposureCohort,
  daysBetween,
  type ExperimentColumns,
  type ExperimentRow,
  experimentNamesStartingWith,
  type FlagRef,
  insertExperiment,
  metricResults,
  insertFlagUnlessTaken,
  liveFlag,
  replaceSavedMetricLinks,
  updateExperimentColumns,
  updateFlagFilters,
} from './store.ts';

/** Input an experiment rule refuses: the message, the field (PostHog's `attr`) and the code. */
export class ExperimentInputError extends Error {
  readonly attr: string | null;
  readonly code: string;
  constructor(message: string, attr: string | null = null, code = 'invalid_input') {
    super(message);
    this.attr = attr;
    this.code = code;
  }
}
const validationError = (detail: string, attr: string | null = null, code = 'invalid_input') =>
  new ExperimentInputError(detail, attr, code);

/** What a create or update may carry (the API's request schemas validate the shapes first). */
export interface ExperimentInput {
  name?: string;
  description?: string | null;
  start_date?: string | null;
  end_date?: string | null;
  feature_flag_key?: string;
  holdout_id?: number | null;
  parameters?: Record<string, unknown> | null;
  secondary_metrics?: unknown[] | null;
  saved_metrics_ids?: unknown;
  filters?: Record<string, unknown> | null;
  archived?: boolean;
  deleted?: boolean;
  type?: string | null;
  exposure_criteria?: Record<string, unknown> | null;
  metrics?: unknown[] | null;
  metrics_secondary?: unknown[] | null;
  stats_config?: Record<string, unknown> | null;
  _create_in_folder?: string;
  conclusion?: string | null;
  conclusion_comment?: string | null;
  primary_metrics_ordered_uuids?: unknown[] | null;
  secondary_metrics_ordered_uuids?: unknown[] | null;
}

type Tx = EntityManager;
type Variant = { key: string } & Record<string, unknown>;
type Metric = Record<string, unknown>;

export const DEFAULT_VARIANTS = [
  { key: 'control', name: 'Control Group', rollout_percentage: 50 },
  { key: 'test', name: 'Test Variant', rollout_percentage: 50 },
];
const FLAG_KEY = /^[a-zA-Z0-9_-]+$/;

const isVariant = (v: unknown): v is Variant =>
  !!v && typeof v === 'object' && typeof (v as { key?: unknown }).key === 'string';

function variantsOf(parameters: Record<string, unknown> | null | undefined): Variant[] {
  const variants: unknown = parameters?.feature_flag_variants;
  if (variants === undefined || variants === null) return [];
  if (!Array.isArray(variants) || !variants.every(isVariant))
    throw validationError('Feature flag variants must be a list of objects with a key.', 'parameters');
  if (variants.length >= 21) throw validationError('Feature flag variants must be less than 21', 'parameters');
  if (variants.length && !variants.some((v) => v.key === 'control'))
    throw validationError('Feature flag variants must contain a control variant', 'parameters');
  return variants;
}

/** stats_config rules beyond its schema: the method, and a correction or sequential testing only for the frequentist one. */
function checkStatsConfig(statsConfig: {
  method?: unknown;
  multiple_comparison_correction?: { method?: unknown };
  sequential?: { enabled?: unknown };
}) {
  if (statsConfig.method !== 'bayesian' && statsConfig.method !== 'frequentist')
    throw validationError('stats_config.method must be bayesian or frequentist.', 'stats_config');
  const correction = statsConfig.multiple_comparison_correction?.method;
  if (correction && correction !== 'none' && statsConfig.method !== 'frequentist')
    throw validationError(
      'A multiple-comparison correction applies to the frequentist method only; set stats_config.method to frequentist.',
      'stats_config__multiple_comparison_correction',
    );
  if (statsConfig.sequential?.enabled === true && statsConfig.method !== 'frequentist')
    throw validationError(
      'Sequential testing applies to the frequentist method only; set stats_config.method to frequentist.',
      'stats_config__sequential',
    );
}

/** The maths a ratio's numerator or denominator may take: count its events, or sum a property of them. */
const RATIO_MATHS = ['total', 'sum'];

/**
 * A ratio metric (PostHog's ExperimentRatioMetric) needs a numerator and a denominator, each a source
 * of events as a mean metric's (an event, its math, the property a sum adds up): the engine counts
 * events or sums a property per person.
 */
function checkRatioMetric(metric: unknown, attr: string) {
  const m = metric as Metric | null;
  if (m?.metric_type !== 'ratio') return;
  for (const part of ['numerator', 'denominator'] as const) {
    const source = m[part] as Record<string, unknown> | null | undefined;
    if (!source || typeof source !== 'object' || Array.isArray(source))
      throw validationError(`A ratio metric needs a ${part}: a source of events, as a mean metric's.`, attr);
    if (source.kind !== undefined && source.kind !== 'EventsNode')
      throw validationError(`The ratio metric's ${part} must be an EventsNode.`, attr);
    if (typeof source.event !== 'string' || !source.event)
      throw validationError(`The ratio metric's ${part} needs an event.`, attr);
    const math = source.math ?? 'total';
    if (typeof math !== 'string' || !RATIO_MATHS.includes(math))
      throw validationError(`The ratio metric's ${part} math must be one of ${RATIO_MATHS.join(', ')}.`, attr);
    if (math === 'sum' && (typeof source.math_property !== 'string' || !source.math_property))
      throw validationError(`The ratio metric's ${part} sums a property: set its math_property.`, attr);
  }
}

/** Sequential testing applies to the metric kinds the engine computes (mean, funnel), not to ratio or retention metrics. */
function checkSequentialMetrics(statsConfig: unknown, metrics: unknown[], attr: string) {
  for (const m of metrics) checkRatioMetric(m, attr);
  if (!sequentialConfig(statsConfig)) return;
  for (const m of metrics) {
    const type = (m as Metric | null)?.metric_type;
    if (typeof type === 'string' && !SEQUENTIAL_METRIC_TYPES.includes(type))
      throw validationError(
        `Sequential testing applies to mean and funnel metrics only, not to ${JSON.stringify(type)} metrics.`,
        attr,
      );
  }
}

/** Each guardrail names one of the experiment's metrics (primary or secondary), of a kind the check computes. */
function checkGuardrails(statsConfig: unknown, metrics: Metric[], secondary: Metric[]) {
  const all = [...metrics, ...secondary];
  for (const [i, g] of guardrailsOf(statsConfig).entries()) {
    const metric = all.find((m) => m?.uuid === g.metric_uuid);
    if (!metric)
      throw validationError(
        `Guardrail ${i + 1}: metric ${g.metric_uuid} is not one of this experiment's metrics (metrics or metrics_secondary).`,
        'stats_config__guardrails',
      );
    if (!metricShape(metric) || metric.metric_type === 'ratio')
      throw validationError(
        `Guardrail ${i + 1}: metric ${g.metric_uuid} cannot be checked: only mean and funnel metrics of events can.`,
        'stats_config__guardrails',
      );
  }
}

/** parameters.allocation (adaptive allocation, bandit.ts): its shape and settings. */
function checkAllocation(parameters: unknown, variants: number) {
  const problem = allocationProblem(parameters, variants);
  if (problem) throw validationError(problem, 'parameters');
}

function checkDates(start: unknown, end: unknown) {
  if (start && end && new Date(end as string) <= new Date(start as string))
    throw validationError('End date must be after start date');
}

/** Adds fingerprints (and uuids) to metrics, and appends missing uuids to the ordering array. */
function withFingerprints(
  metrics: unknown,
  startDate: unknown,
  statsConfig: Record<string, unknown> | null,
  exposureCriteria: unknown,
): Metric[] {
  if (!Array.isArray(metrics)) return [];
  const start = startDate ? new Date(startDate as string).toISOString() : null;
  const method = typeof statsConfig?.method === 'string' ? statsConfig.method : 'bayesian';
  const correction = method === 'frequentist' ? correctionConfig(statsConfig) : null;
  const lookback = cupedLookbackDays(statsConfig);
  const sequential = method === 'frequentist' ? sequentialConfig(statsConfig) : null;
  const analysis =
    correction || lookback || sequential
      ? {
          correction,
          ...(lookback ? { cuped_lookback_days: lookback } : {}),
          ...(sequential ? { sequential } : {}),
        }
      : null;
  return metrics.map((m) => {
    if (!m || typeof m !== 'object') throw validationError('Each metric must be an object.', 'metrics');
    const metric = { uuid: randomUUID(), ...(m as object) } as Record<string, unknown>;
    return {
      ...metric,
      fingerprint: metricFingerprint(metric, start, method, exposureCriteria, analysis),
    };
  });
}

function orderedUuids(existing: unknown, metrics: Metric[]): string[] | null {
  if (metrics.length === 0 && (existing === null || existing === undefined)) return null;
  const list = Array.isArray(existing) ? existing.filter((u) => typeof u === 'string') : [];
  for (const m of metrics) {
    const uuid = m.uuid as string;
    if (!list.includes(uuid)) list.push(uuid);
  }
  return list;
}

async function savedMetricLinks(tx: Tx, actor: Actor, experimentId: number, ids: unknown) {
  const links: { id: number; metadata: Record<string, unknown> | undefined }[] = [];
  if (ids === null || ids === undefined) return replaceSavedMetricLinks(tx, experimentId, links);
  if (!Array.isArray(ids))
    throw validationError(
      `Expected a list of items but got type "${typeof ids === 'object' ? 'dict' : typeof ids}".`,
      'saved_metrics_ids',
      'not_a_list',
    );
  for (const entry of ids as unknown[]) {
    if (!entry || typeof entry !== 'object' || Array.isArray(entry))
      throw validationError('Saved metric must be an object', 'saved_metrics_ids');
    const item = entry as { id?: unknown; metadata?: unknown };
    if (item.id === undefined) throw validationError('Saved metric must have an id', 'saved_metrics_ids');
    if (
      item.metadata !== undefined &&
      (typeof item.metadata !== 'object' || item.metadata === null || Array.isArray(item.metadata))
    )
      throw validationError('Metadata must be an object', 'saved_metrics_ids');
    const metadata = item.metadata as Record<string, unknown> | undefined;
    if (metadata && !('type' in metadata)) throw validationError('Metadata must have a type key', 'saved_metrics_ids');
    const id = item.id;
    if (typeof id !== 'number' || !Number.isInteger(id))
      throw validationError('Saved metric does not exist or does not belong to this project', 'saved_metrics_ids');
    if (!(await findSavedMetric(tx, actor.projectId, id)))
      throw validationError('Saved metric does not exist or does not belong to this project', 'saved_metrics_ids');
    links.push({ id, metadata });
  }
  await replaceSavedMetricLinks(tx, experimentId, links);
}

async function holdoutFilters(tx: Tx, actor: Actor, holdoutId: unknown): Promise<unknown[] | null> {
  if (holdoutId === null || holdoutId === undefined) return null;
  const filters = Number.isInteger(holdoutId)
    ? await storedHoldoutFilters(tx, actor.projectId, holdoutId as number)
    : null;
  if (!filters)
    throw validationError(`Invalid pk "${String(holdoutId)}" - object does not exist.`, 'holdout_id', 'does_not_exist');
  return filters;
}

/** The live flag with this key, if any, checked to be usable by an experiment. */
async function eligibleFlag(tx: Tx, actor: Actor, key: string): Promise<FlagRef | null> {
  const existing = await liveFlag(tx, actor.projectId, key);
  if (!existing) return null;
  const variants = existing.filters?.multivariate?.variants ?? [];
  if (variants.length < 2) throw validationError('Feature flag is not eligible for experiments.');
  if (variants[0]?.key !== 'control') throw validationError('Feature flag must have control as the first variant.');
  return existing;
}

/** The experiment's flag: an existing one with this key (reused unchanged) or a new one. */
async function resolveFlag(
  tx: Tx,
  actor: Actor,
  key: string,
  name: string,
  parameters: Record<string, unknown> | null | undefined,
  draft: boolean,
  holdoutGroups: unknown,
): Promise<FlagRef> {
  const existing = await eligibleFlag(tx, actor, key);
  if (existing) return existing;
  if (!FLAG_KEY.test(key) || key.length > 400)
    throw validationError('Only letters, numbers, hyphens (-) & underscores (_) are allowed.', 'key', 'invalid_key');
  const variants = variantsOf(parameters);
  const filters = {
    groups: [{ properties: [], rollout_percentage: 100 }],
    multivariate: { variants: variants.length ? variants : DEFAULT_VARIANTS },
    aggregation_group_type_index: parameters?.aggregation_group_type_index ?? null,
    holdout_groups: holdoutGroups ?? null,
    ...(holdoutGroups ? { holdout: holdoutOf(holdoutGroups) } : {}),
  };
  // A concurrent request may make a flag with this key after the lookup: then that flag is the one.
  const flag = await insertFlagUnlessTaken(
    tx,
    {
      projectId: actor.projectId,
      key,
      name: `Feature Flag for Experiment ${name}`,
      filters,
      active: !draft,
      continuity: parameters?.ensure_experience_continuity === true,
    },
    actor.userId,
  );
  const resolved = flag ?? (await eligibleFlag(tx, actor, key));
  if (!resolved) throw validationError('The feature flag key changed while saving; try again.', 'feature_flag_key');
  return resolved;
}

/** The holdout as the flag evaluator reads it: {id, exclusion_percentage} from holdout filters. */
function holdoutOf(holdoutGroups: unknown): { id: number; exclusion_percentage: number } | null {
  const group = Array.isArray(holdoutGroups)
    ? (holdoutGroups[0] as { variant?: unknown; rollout_percentage?: unknown } | undefined)
    : null;
  const id = Number(String(group?.variant ?? '').replace('holdout-', ''));
  return group && Number.isInteger(id) ? { id, exclusion_percentage: Number(group.rollout_percentage ?? 0) } : null;
}

/** A date-time the API accepted (ISO 8601), as stored; null stays null, undefined (not sent) stays undefined. */
function dateOf(value: string | null): Date | null;
function dateOf(value: string | null | undefined): Date | null | undefined;
function dateOf(value: string | null | undefined) {
  return value === undefined || value === null ? value : new Date(value);
}

export async function createExperiment(
  em: EntityManager,
  actor: Actor,
  body: ExperimentInput & { name: string; feature_flag_key: string },
  options: { activity?: boolean } = {},
): Promise<number> {
  checkDates(body.start_date, body.end_date);
  const draft = !body.start_date;
  const statsConfig: Record<string, unknown> = { ...(body.stats_config ?? {}) };
  statsConfig.method ??= 'bayesian';
  checkStatsConfig(statsConfig);
  checkSequentialMetrics(statsConfig, Array.isArray(body.metrics) ? body.metrics : [], 'metrics');
  checkSequentialMetrics(
    statsConfig,
    Array.isArray(body.metrics_secondary) ? body.metrics_secondary : [],
    'metrics_secondary',
  );
  checkAllocation(body.parameters, variantsOf(body.parameters).length || DEFAULT_VARIANTS.length);
  let id = 0;
  await em.fork().transactional(async (tx) => {
    const holdout = await holdoutFilters(tx, actor, body.holdout_id);
    const flag = await resolveFlag(tx, actor, body.feature_flag_key, body.name, body.parameters, draft, holdout);
    const metrics = withFingerprints(body.metrics ?? [], body.start_date, statsConfig, body.exposure_criteria);
    const secondary = withFingerprints(
      body.metrics_secondary ?? [],
      body.start_date,
      statsConfig,
      body.exposure_criteria,
    );
    checkGuardrails(statsConfig, metrics, secondary);
    id = await insertExperiment(tx, {
      project_id: actor.projectId,
      name: body.name,
      description: body.description ?? null,
      filters: body.filters ?? {},
      parameters: body.parameters ?? {},
      secondary_metrics: body.secondary_metrics ?? [],
      created_by_id: actor.userId,
      feature_flag_id: flag.id,
      holdout_id: body.holdout_id ?? null,
      start_date: dateOf(body.start_date ?? null),
      end_date: dateOf(body.end_date ?? null),
      archived: body.archived ?? false,
      type: body.type ?? 'product',
      exposure_criteria: body.exposure_criteria ?? {},
      metrics: metrics,
      metrics_secondary: secondary,
      stats_config: statsConfig,
      conclusion: body.conclusion ?? null,
      conclusion_comment: body.conclusion_comment ?? null,
      primary_metrics_ordered_uuids: orderedUuids(body.primary_metrics_ordered_uuids, metrics),
      secondary_metrics_ordered_uuids: orderedUuids(body.secondary_metrics_ordered_uuids, secondary),
      create_in_folder: body._create_in_folder ?? null,
    });
    await savedMetricLinks(tx, actor, id, body.saved_metrics_ids);
    if (options.activity !== false)
      await recordActivity(tx, {
        ...actor,
        scope: 'Experiment',
        itemId: String(id),
        activity: 'created',
        detail: { name: body.name },
      });
  });
  return id;
}

const UPDATABLE = new Set([
  'name',
  'description',
  'start_date',
  'end_date',
  'filters',
  'parameters',
  'archived',
  'deleted',
  'secondary_metrics',
  'holdout',
  'holdout_id',
  'exposure_criteria',
  'metrics',
  'metrics_secondary',
  'stats_config',
  'conclusion',
  'conclusion_comment',
  'primary_metrics_ordered_uuids',
  'secondary_metrics_ordered_uuids',
  'saved_metrics_ids',
  '_create_in_folder',
  'type',
  'feature_flag_key',
]);

export async function updateExperiment(
  em: EntityManager,
  actor: Actor,
  current: ExperimentRow,
  body: ExperimentInput,
): Promise<void> {
  const flagKey = current.feature_flag.key;
  const rejected = Object.keys(body)
    .filter((k) => !UPDATABLE.has(k))
    .sort();
  if (rejected.length) throw validationError(`Can't update keys: ${rejected.join(', ')} on Experiment`);
  const properties = body.filters?.properties;
  if (Array.isArray(properties) && properties.length)
    throw validationError('Experiments do not support global filter properties');
  const startDate = body.start_date !== undefined ? body.start_date : current.start_date;
  const endDate = body.end_date !== undefined ? body.end_date : current.end_date;
  checkDates(startDate, endDate);
  const launched = !!current.start_date;
  const flagVariants = current.feature_flag.filters?.multivariate?.variants ?? [];
  if (body.parameters) {
    const variants = variantsOf(body.parameters);
    checkAllocation(body.parameters, variants.length || flagVariants.length);
    if (launched && body.parameters.feature_flag_variants !== undefined) {
      const sent = variants.map((v) => v.key).sort();
      const have = flagVariants.map((v) => v.key).sort();
      if (sent.length !== have.length || sent.some((k, i) => k !== have[i]))
        throw validationError("Can't update feature_flag_variants on Experiment");
    }
  }
  const holdoutChanged = body.holdout_id !== undefined && body.holdout_id !== current.holdout_id;
  if (launched && holdoutChanged) throw validationError("Can't update holdout on running Experiment");
  // A draft may still pick its flag and type; once launched, users are bucketed by that flag.
  const newKey =
    body.feature_flag_key !== undefined && body.feature_flag_key !== flagKey ? body.feature_flag_key : null;
  if (launched && newKey !== null) {
    throw validationError(
      "Can't update feature_flag_key on a launched Experiment: its users are already assigned variants " +
        'by the current flag. Change it while the experiment is a draft (no start_date), or create a new experiment.',
      'feature_flag_key',
    );
  }
  if (launched && body.type !== undefined && body.type !== current.type) {
    throw validationError(
      "Can't update type on a launched Experiment: it is fixed once the experiment has a start_date.",
      'type',
    );
  }
  const statsConfig =
    body.stats_config !== undefined ? { method: 'bayesian', ...body.stats_config } : current.stats_config;
  if (body.stats_config !== undefined) checkStatsConfig(statsConfig ?? {});
  const exposure = body.exposure_criteria !== undefined ? body.exposure_criteria : current.exposure_criteria;
  const metrics = withFingerprints(body.metrics ?? current.metrics, startDate, statsConfig, exposure);
  const secondary = withFingerprints(
    body.metrics_secondary ?? current.metrics_secondary,
    startDate,
    statsConfig,
    exposure,
  );
  checkSequentialMetrics(statsConfig, metrics, 'metrics');
  checkSequentialMetrics(statsConfig, secondary, 'metrics_secondary');
  checkGuardrails(statsConfig, metrics, secondary);

  await em.fork().transactional(async (tx) => {
    const holdoutGroups = holdoutChanged ? await holdoutFilters(tx, actor, body.holdout_id) : undefined;
    // A new key: as create does, reuse a live flag with that key or make one from the experiment's
    // variants and holdout.
    let flag: FlagRef = { id: current.feature_flag.id, filters: current.feature_flag.filters };
    if (newKey !== null) {
      const parameters = body.parameters !== undefined ? body.parameters : current.parameters;
      const holdout = holdoutChanged ? holdoutGroups : await holdoutFilters(tx, actor, current.holdout_id);
      flag = await resolveFlag(tx, actor, newKey, body.name ?? current.name, parameters, true, holdout);
    }
    const fields: Partial<ExperimentColumns> = {
      feature_flag_id: newKey !== null ? flag.id : undefined,
      type: body.type,
      name: body.name,
      description: body.description,
      start_date: dateOf(body.start_date),
      end_date: dateOf(body.end_date),
      archived: body.archived,
      deleted: body.deleted,
      conclusion: body.conclusion,
      conclusion_comment: body.conclusion_comment,
      filters: body.filters,
      parameters: body.parameters,
      secondary_metrics: body.secondary_metrics,
      exposure_criteria: body.exposure_criteria,
      holdout_id: body.holdout_id,
      stats_config: statsConfig,
      metrics,
      metrics_secondary: secondary,
      primary_metrics_ordered_uuids: orderedUuids(
        body.primary_metrics_ordered_uuids ?? current.primary_metrics_ordered_uuids,
        metrics,
      ),
      secondary_metrics_ordered_uuids: orderedUuids(
        body.secondary_metrics_ordered_uuids ?? current.secondary_metrics_ordered_uuids,
        secondary,
      ),
    };
    await updateExperimentColumns(tx, current.id, fields);
    if (body.saved_metrics_ids !== undefined) await savedMetricLinks(tx, actor, current.id, body.saved_metrics_ids);

    // The flag: variants follow a draft's parameters; the holdout follows holdout_id; launch activates it.
    const filters: Record<string, unknown> = { ...flag.filters };
    let flagChanged = false;
    if (!launched && body.parameters) {
      const variants = variantsOf(body.parameters);
      filters.multivariate = { variants: variants.length ? variants : DEFAULT_VARIANTS };
      filters.aggregation_group_type_index = body.parameters.aggregation_group_type_index ?? null;
      flagChanged = true;
    }
    if (holdoutChanged) {
      filters.holdout_groups = holdoutGroups ?? null;
      filters.holdout = holdoutGroups ? holdoutOf(holdoutGroups) : null;
      flagChanged = true;
    }
    const launching = !launched && !!body.start_date;
    if (flagChanged || launching) {
      await updateFlagFilters(tx, flag.id, filters, launching);
    }
    const before = current as Record<string, unknown>;
    await recordActivity(tx, {
      ...actor,
      scope: 'Experiment',
      itemId: String(current.id),
      activity: body.deleted === true ? 'deleted' : 'updated',
      detail: {
        name: body.name ?? current.name,
        changes: Object.entries(body).map(([field, after]) => ({
          type: 'Experiment',
          action: 'changed',
          field,
          before: (field === 'feature_flag_key' ? flagKey : before[field]) ?? null,
          after,
        })),
      },
    });
  });
}

/** Reverses a guardrail trip: the flag as it was, the circuit breaker off. 400 when it has not tripped. */
export async function resetGuardrails(em: EntityManager, actor: Actor, experimentId: number): Promise<void> {
  if (!(await resetCircuitBreaker(em.fork(), experimentId, actor)))
    throw validationError(
      "This experiment's guardrail circuit breaker has not tripped: there is nothing to reset.",
      'guardrail_status',
      'not_tripped',
    );
}

/** Copies an experiment as a draft named "<name> (Copy)" (numbered when taken); returns the copy's id. */
export async function duplicateExperiment(
  em: EntityManager,
  actor: Actor,
  source: ExperimentRow,
  flagKey: string | undefined,
): Promise<number> {
  const names = await experimentNamesStartingWith(em, actor.projectId, `${source.name} (Copy)`);
  let name = `${source.name} (Copy)`;
  for (let n = 1; names.has(name); n++) name = `${source.name} (Copy) ${n}`;
  return createExperiment(em, actor, {
    name,
    description: source.description,
    type: source.type,
    parameters: source.parameters,
    filters: source.filters,
    secondary_metrics: source.secondary_metrics,
    metrics: source.metrics,
    metrics_secondary: source.metrics_secondary,
    stats_config: source.stats_config,
    exposure_criteria: source.exposure_criteria,
    primary_metrics_ordered_uuids: source.primary_metrics_ordered_uuids,
    secondary_metrics_ordered_uuids: source.secondary_metrics_ordered_uuids,
    feature_flag_key: flagKey ?? source.feature_flag.key,
    saved_metrics_ids: source.saved_metrics.map((l) => ({ id: l.saved_metric, metadata: l.metadata })),
  });
}

/** Creates the dynamic cohort of persons exposed to a launched experiment (who got its flag since the start). */
export async function exposureCohortFor(em: EntityManager, actor: Actor, experiment: ExperimentRow) {
  if (!experiment.feature_flag) throw validationError('Experiment does not have a feature flag');
  const startDate = experiment.start_date;
  if (!startDate) throw validationError('Experiment does not have a start date');
  if (experiment.exposure_cohort_id) throw validationError('Experiment already has an exposure cohort');
  const variants = (experiment.feature_flag.filters?.multivariate?.variants ?? []).map((v) => v.key);
  const filters = {
    properties: {
      type: 'OR',
      values: [
        {
          type: 'OR',
          values: [
            {
              type: 'behavioral',
              value: 'performed_event',
              key: '$feature_flag_called',
              negation: false,
              event_type: 'events',
              explicit_datetime: new Date(startDate).toISOString().replace('Z', '+00:00'),
              event_filters: [
                { key: '$feature_flag', value: [experiment.feature_flag.key], operator: 'exact', type: 'event' },
                ...(variants.length
                  ? [{ key: '$feature_flag_response', value: variants, operator: 'exact', type: 'event' }]
                  : []),
              ],
            },
          ],
        },
      ],
    },
  };
  return em
    .fork()
    .transactional((tx) =>
      createExposureCohort(
        tx,
        actor.projectId,
        experiment.id,
        `Users exposed to experiment "${experiment.name}"`,
        filters,
        actor.userId,
      ),
    );
}

/** One metric's daily results since the start (null for a day not computed), with their overall status. */
export async function metricTimeseries(
  em: EntityManager,
  experiment: ExperimentRow,
  metricUuid: string | undefined,
  fingerprint: string | undefined,
  timezone: string,
) {
  if (!metricUuid) throw validationError('metric_uuid query parameter is required');
  if (!fingerprint) throw validationError('fingerprint query parameter is required');
  if (!experiment.start_date) throw validationError('Experiment has not been started yet');
  const rows = await metricResults(em, experiment.id, metricUuid, fingerprint);
  const days = await daysBetween(em, experiment.start_date, experiment.end_date, timezone);
  const series: Record<string, unknown> = Object.fromEntries(days.map((d) => [d, null]));
  const errors: Record<string, string | null> = {};
  let completed = 0;
  for (const row of rows) {
    if (row.status === 'completed') {
      series[row.day] = row.result;
      completed++;
    } else if (row.status === 'failed') errors[row.day] = row.error_message;
  }
  const failed = Object.keys(errors).length;
  const status =
    rows.length === 0
      ? 'pending'
      : completed === 0 && failed > 0
        ? 'failed'
        : completed === days.length
          ? 'completed'
          : completed > 0
            ? 'partial'
            : 'pending';
  const computed = rows
    .filter((r) => r.status === 'completed')
    .map((r) => r.computed_at)
    .sort();
  return {
    experiment_id: experiment.id,
    metric_uuid: metricUuid,
    status,
    timeseries: series,
    errors: failed ? errors : null,
    computed_at: computed.at(-1) ?? null,
    created_at: rows[0]?.created_at ?? experiment.created_at,
    updated_at: rows.at(-1)?.updated_at ?? experiment.updated_at,
  };
}

// ---- holdouts and saved metrics ----

/** The fields a holdout's create (or, `partial`, update) body sets. */
export function holdoutFields(
  body: { name?: string; description?: string | null; filters?: unknown[] },
  partial: boolean,
): HoldoutFields {
  if (!partial && !body.name) throw validationError('This field is required.', 'name', 'required');
  const out: HoldoutFields = {};
  if (body.name !== undefined) out.name = body.name;
  if (body.description !== undefined) out.description = body.description;
  if (body.filters === undefined && partial) return out;
  const filters = body.filters;
  if (!Array.isArray(filters) || filters.length === 0)
    throw validationError('Filters are required to create an holdout group', 'filters');
  for (const f of filters) {
    const rollout = (f as { rollout_percentage?: unknown } | null)?.rollout_percentage;
    if (!f || typeof f !== 'object' || rollout === undefined || rollout === null)
      throw validationError('Rollout percentage must be present.', 'filters');
    const p = Number(rollout);
    if (!Number.isFinite(p) || p < 0 || p > 100)
      throw validationError('Rollout percentage must be between 0 and 100.', 'filters');
  }
  out.filters = filters;
  return out;
}

/** Tags each group with the holdout's variant and puts the groups on its experiments' flags (null: none). */
async function syncHoldoutFlags(tx: EntityManager, id: number, filters: unknown[] | null | undefined) {
  const groups = filters ? filters.map((f) => ({ ...(f as object), variant: `holdout-${id}` })) : null;
  const exclusion = Number((groups?.[0] as { rollout_percentage?: unknown })?.rollout_percentage ?? 0);
  await setHoldoutGroups(tx, id, groups, groups ? { id, exclusion_percentage: exclusion } : null);
}

/** Creates a holdout and tags its groups; returns its id. */
export function createHoldout(em: EntityManager, actor: Actor, fields: HoldoutFields & { name: string }) {
  return em.fork().transactional(async (tx) => {
    const id = await insertHoldout(tx, actor.projectId, actor.userId, fields);
    await syncHoldoutFlags(tx, id, fields.filters);
    return id;
  });
}

/** Changes a holdout; new groups go to its experiments' flags. */
export async function changeHoldout(em: EntityManager, id: number, fields: HoldoutFields) {
  await em.fork().transactional(async (tx) => {
    await updateHoldout(tx, id, fields);
    if ('filters' in fields) await syncHoldoutFlags(tx, id, fields.filters);
  });
}

/** Deletes a holdout, taking its groups off its experiments' flags first. */
export async function removeHoldout(em: EntityManager, id: number) {
  await em.fork().transactional(async (tx) => {
    await syncHoldoutFlags(tx, id, null);
    await deleteHoldout(tx, id);
  });
}

const METRIC_KINDS = ['ExperimentMetric', 'ExperimentTrendsQuery', 'ExperimentFunnelsQuery'];

/** The fields a saved metric's create (or, `partial`, update) body sets. */
export function savedMetricFields(
  body: { name?: string; description?: string | null; query?: Record<string, unknown>; tags?: string[] },
  partial: boolean,
): SavedMetricFields {
  if (!partial && !body.name) throw validationError('This field is required.', 'name', 'required');
  const out: SavedMetricFields = {};
  if (body.name !== undefined) out.name = body.name;
  if (body.description !== undefined) out.description = body.description;
  if (body.tags !== undefined) out.tags = [...new Set<string>(body.tags)];
  if (body.query === undefined && partial) return out;
  const query = body.query;
  if (!query || Object.keys(query).length === 0)
    throw validationError('Query is required to create a saved metric', 'query');
  if (typeof query.kind !== 'string' || !METRIC_KINDS.includes(query.kind))
    throw validationError(
      "Metric query kind must be 'ExperimentMetric', 'ExperimentTrendsQuery' or 'ExperimentFunnelsQuery'",
      'query',
    );
  if (query.kind === 'ExperimentMetric' && !query.metric_type)
    throw validationError('ExperimentMetric requires a metric_type', 'query');
  if (
    query.kind === 'ExperimentMetric' &&
    (typeof query.metric_type !== 'string' || !['mean', 'funnel', 'ratio'].includes(query.metric_type))
  )
    throw validationError("ExperimentMetric metric_type must be 'mean', 'funnel', or 'ratio'", 'query');
  checkRatioMetric(query, 'query');
  out.query = query;
  return out;
}
