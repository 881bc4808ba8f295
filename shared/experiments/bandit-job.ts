// The bandit's worker job (every BANDIT_CRON, default hourly at :07): each running experiment with
// parameters.allocation whose interval_hours have passed since its last look. From the experiment's
// events (the results computation's own fold, person-state.ts, with persons grouped by the period of
// their first exposure, periods bounded by the reallocations) it computes the primary metric's
// counts per period, the posterior probabilities of being best from all periods together, and the
// period-weighted estimate (bandit.ts); when the rollout percentages this gives differ from the
// flag's, one transaction sets them on the flag, appends the reallocation to the history and writes
// the activity log. A tripped guardrail stops it (the flag serves control). Each run reads the
// experiment's events from its start (as a full results computation does).
import type { EntityManager } from '@mikro-orm/postgresql';
import type { Job } from 'bullmq';
import { sql } from 'kysely';
import { experimentNames, type EventStore, type EventStoreDeps } from '../events/index.ts';
import { recordActivity } from '../platform/activity-log.ts';
import { db } from '../platform/db/kysely.ts';
import type { Deps } from '../platform/deps.ts';
import type { JobData } from '../platform/jobs.ts';
import {
  allocationOf,
  allocationPercentages,
  type BanditEstimate,
  pooledCounts,
  thompsonProbabilities,
  weightedEstimates,
} from './bandit.ts';
import type { VariantStats } from './moments.ts';
import { advance, type MetricRule, type PersonEvents, type Window } from './person-state.ts';
import {
  BATCH_EVENTS,
  type ExperimentForResults,
  type ExperimentMetric,
  experimentForResults,
  firstExposure,
  metricsOf,
  personBatches,
  readPlan,
  startedExperiments,
} from './results.ts';
import { seededRng } from './simulation.ts';
import { updateFlagFilters } from './store.ts';

type JobDeps = Deps & EventStoreDeps;

const DAY = 86400_000;
const HOUR = 3600_000;
/** A run this close to the interval counts as due (the cron's minute may come a little early). */
const DUE_SLACK = 5 * 60_000;

const record = (x: unknown): Record<string, unknown> =>
  x && typeof x === 'object' && !Array.isArray(x) ? (x as Record<string, unknown>) : {};

const zero = (key: string): VariantStats => ({ key, number_of_samples: 0, sum: 0, sum_squares: 0 });

/**
 * The metric's counts per period of first exposure, as of `until`: `boundaries` (epoch ms, ascending,
 * the first the start date) begin the periods; period p holds the persons whose first exposure is in
 * [boundaries[p], boundaries[p + 1]), each counted by the results computation's rules (their events
 * from their first exposure to `until`, none once exposed to a second variant). One read of the events.
 */
export async function cohortCounts(
  em: EntityManager,
  events: EventStore,
  experiment: ExperimentForResults,
  metric: ExperimentMetric,
  until: Date,
  boundaries: readonly number[],
): Promise<VariantStats[][]> {
  const { shapes, properties, events: names } = readPlan([metric]);
  const shape = shapes[0];
  if (shape instanceof Error) throw shape;
  const numbered = experimentNames({ events: names });
  const rule: MetricRule = {
    kind: shape.kind,
    events: shape.events.map((name) => numbered.indexOf(name)),
    valueIndex: shape.mathProperty ? properties.findIndex((p) => p.key === shape.mathProperty) : null,
    denominatorIndex: shape.denominatorProperty
      ? properties.findIndex((p) => p.key === shape.denominatorProperty)
      : null,
  };
  const firstDay = Math.floor(experiment.startDate.getTime() / DAY) * DAY;
  const window: Window = {
    variants: experiment.variants,
    firstDay: firstDay * 1000,
    baseDay: -1,
    days: Math.max(1, Math.ceil((until.getTime() - firstDay) / DAY)),
    saveDay: null,
    cuped: false,
  };
  const totals = boundaries.map(() => experiment.variants.map(zero));
  const filter = { flagKey: experiment.flagKey, events: names, from: experiment.startDate, to: until };
  await em.transactional(async (tx) => {
    const read = {
      events,
      projectId: experiment.projectId,
      filter,
      properties,
      exposedFrom: experiment.startDate.getTime() * 1000,
    };
    for await (const batch of personBatches(tx, read, BATCH_EVENTS)) {
      const groups = boundaries.map(
        () => [] as [string, { state: undefined; events: PersonEvents; covariate: number }][],
      );
      for (const [person, list] of batch) {
        const t0 = firstExposure(list, experiment.variants);
        if (t0 === undefined) continue;
        let p = boundaries.length - 1;
        while (p > 0 && t0 < boundaries[p] * 1000) p--;
        groups[p].push([person, { state: undefined, events: list, covariate: 0 }]);
      }
      for (const [p, group] of groups.entries()) {
        if (!group.length) continue;
        const last = advance(rule, window, group).changes.at(-1);
        if (!last) continue;
        totals[p] = totals[p].map((v, i) => {
          const c = last.variants[i];
          const out: VariantStats = {
            key: v.key,
            number_of_samples: v.number_of_samples + c.number_of_samples,
            sum: v.sum + c.sum,
            sum_squares: v.sum_squares + c.sum_squares,
          };
          if (c.denominator_sum !== undefined) {
            out.denominator_sum = (v.denominator_sum ?? 0) + c.denominator_sum;
            out.denominator_sum_squares = (v.denominator_sum_squares ?? 0) + (c.denominator_sum_squares ?? 0);
            out.numerator_denominator_sum_product =
              (v.numerator_denominator_sum_product ?? 0) + (c.numerator_denominator_sum_product ?? 0);
          }
          return out;
        });
      }
    }
  });
  return totals;
}

/** A reallocation, as the history keeps it. */
export interface Reallocation {
  at: string;
  before: Record<string, number>;
  after: Record<string, number>;
  probabilities: Record<string, number>;
  exposures: Record<string, number>;
}

/** A bandit run's outcome (experiment_bandit.result, and the `bandit` section of the results). */
export interface BanditRun {
  metric_uuid: string | null;
  status: 'reallocated' | 'unchanged' | 'not_enough_exposures' | 'failed';
  error: string | null;
  /** Rollout percentage per variant after this run. */
  weights: Record<string, number>;
  probabilities: Record<string, number> | null;
  exposures: Record<string, number>;
  periods: { start: string; end: string; exposures: Record<string, number> }[];
  estimates: BanditEstimate[];
}

/** Running experiments with adaptive allocation whose guardrail has not tripped (one, with `only`), with their state. */
function banditExperiments(em: EntityManager, only?: number) {
  const running = startedExperiments(em)
    .leftJoin('experiment_bandit as b', 'b.experiment_id', 'x.id')
    .select(['b.checked_at as bandit_checked_at', 'b.history as bandit_history'])
    .where(sql<boolean>`jsonb_typeof(x.parameters->'allocation') = 'object'`)
    .where((eb) => eb.or([eb('x.end_date', 'is', null), eb('x.end_date', '>', sql<Date>`now()`)]))
    .where(sql<boolean>`(x.guardrail_status->>'state') is distinct from 'tripped'`)
    .orderBy('x.id');
  return (only ? running.where('x.id', '=', only) : running).execute();
}

const byKey = (keys: readonly string[], values: readonly number[]) =>
  Object.fromEntries(keys.map((k, i) => [k, values[i]]));

export async function banditReallocation(
  job: Job<JobData['banditReallocation']>,
  deps: JobDeps,
  now = new Date(),
): Promise<{ experiments: number; looked: number[]; reallocated: number[] }> {
  const em = deps.orm.em.fork();
  const rows = await banditExperiments(em, job.data?.experimentId);
  const looked: number[] = [];
  const reallocated: number[] = [];
  for (const row of rows) {
    const config = allocationOf(row.parameters);
    if (!config) continue;
    const since = new Date(row.bandit_checked_at ?? row.start_date).getTime();
    if (!job.data?.force && now.getTime() - since < config.interval_hours * HOUR - DUE_SLACK) continue;
    looked.push(row.id);
    const history = (Array.isArray(row.bandit_history) ? row.bandit_history : []) as unknown as Reallocation[];
    const run = await banditRun(em, deps.events, row, history, now);
    if (await recordBanditRun(em, row.id, run, now)) reallocated.push(row.id);
    deps.logger.info({ experimentId: row.id, status: run.status, weights: run.weights }, 'bandit run');
  }
  return { experiments: rows.length, looked, reallocated };
}

/** What the run computes (nothing stored yet). */
async function banditRun(
  em: EntityManager,
  events: EventStore,
  row: Parameters<typeof experimentForResults>[0],
  history: Reallocation[],
  now: Date,
): Promise<BanditRun> {
  const experiment = experimentForResults(row);
  const config = allocationOf(row.parameters)!;
  const keys = experiment.variants;
  const filters = record(row.flag_filters);
  const current = (
    Array.isArray(record(filters.multivariate).variants) ? record(filters.multivariate).variants : []
  ) as {
    key: string;
    rollout_percentage?: number;
  }[];
  const weights = Object.fromEntries(current.map((v) => [v.key, Number(v.rollout_percentage ?? 0)]));
  const metric = metricsOf(row.metrics).find((m) => m.uuid === experiment.primaryMetricUuid) ?? null;
  const base: BanditRun = {
    metric_uuid: metric?.uuid ?? null,
    status: 'failed',
    error: null,
    weights,
    probabilities: null,
    exposures: {},
    periods: [],
    estimates: [],
  };
  if (!metric) return { ...base, error: 'The experiment has no primary metric to allocate on.' };
  const boundaries = [experiment.startDate.getTime(), ...history.map((h) => Date.parse(h.at))];
  let periods: VariantStats[][];
  try {
    periods = await cohortCounts(em, events, experiment, metric, now, boundaries);
  } catch (e) {
    return { ...base, error: (e as Error).message };
  }
  const kind = readPlan([metric]).shapes[0] as { kind: 'mean' | 'funnel' | 'ratio' };
  const pooled = pooledCounts(periods, keys);
  const exposures = byKey(
    keys,
    pooled.map((v) => v.number_of_samples),
  );
  const described = {
    ...base,
    exposures,
    periods: periods.map((p, i) => ({
      start: new Date(boundaries[i]).toISOString(),
      end: new Date(boundaries[i + 1] ?? now.getTime()).toISOString(),
      exposures: byKey(
        keys,
        keys.map((k) => p.find((v) => v.key === k)?.number_of_samples ?? 0),
      ),
    })),
    estimates: weightedEstimates(kind.kind, periods, keys, experiment.baselineKey),
  };
  if (pooled.some((v) => v.number_of_samples < config.min_exposures))
    return { ...described, status: 'not_enough_exposures' };
  // Seeded by the experiment and its reallocation count: a rerun gives the same allocation.
  const rng = seededRng(experiment.id * 7919 + history.length);
  const probabilities = thompsonProbabilities(kind.kind, pooled, rng, {
    lowerIsBetter: (metric as { goal?: unknown }).goal === 'decrease',
  });
  if (!probabilities) return { ...described, status: 'not_enough_exposures' };
  const after = byKey(keys, allocationPercentages(probabilities, config.floor));
  const changed = keys.some((k) => after[k] !== weights[k]);
  return {
    ...described,
    status: changed ? 'reallocated' : 'unchanged',
    probabilities: byKey(keys, probabilities),
    weights: after,
  };
}

/**
 * Stores a run: when it reallocates (and the experiment is still a bandit, not tripped, its flag's
 * percentages as the run read them), the flag's new percentages, the history entry and the activity
 * log, in one transaction with the run's result. True when it reallocated.
 */
async function recordBanditRun(em: EntityManager, experimentId: number, run: BanditRun, now: Date): Promise<boolean> {
  return em.transactional(async (tx) => {
    const x = await db(tx)
      .selectFrom('experiment as x')
      .innerJoin('feature_flag as f', 'f.id', 'x.feature_flag_id')
      .leftJoin('experiment_bandit as b', 'b.experiment_id', 'x.id')
      .select([
        'x.id',
        'x.project_id',
        'x.name',
        'x.parameters',
        'x.guardrail_status',
        'x.feature_flag_id',
        'f.filters',
      ])
      .select('b.history')
      .where('x.id', '=', experimentId)
      .forUpdate(['x', 'f'])
      .executeTakeFirst();
    if (!x || !allocationOf(x.parameters) || record(x.guardrail_status).state === 'tripped') return false;
    const history = (Array.isArray(x.history) ? x.history : []) as unknown as Reallocation[];
    const multivariate = record(x.filters?.multivariate);
    const variants = (Array.isArray(multivariate.variants) ? multivariate.variants : []).map(record);
    const before = Object.fromEntries(variants.map((v) => [String(v.key), Number(v.rollout_percentage ?? 0)]));
    let reallocated = false;
    let result = run;
    if (run.status === 'reallocated') {
      // Still a change, to the same variants (the flag may have changed since the run read it).
      const changed = Object.keys(before).some((k) => before[k] !== run.weights[k]);
      const sameVariants =
        variants.length === Object.keys(run.weights).length && variants.every((v) => String(v.key) in run.weights);
      if (changed && sameVariants) {
        const filters = {
          ...x.filters,
          multivariate: {
            ...multivariate,
            variants: variants.map((v) => ({ ...v, rollout_percentage: run.weights[String(v.key)] ?? 0 })),
          },
        };
        await updateFlagFilters(tx, x.feature_flag_id, filters, false);
        const entry: Reallocation = {
          at: now.toISOString(),
          before,
          after: run.weights,
          probabilities: run.probabilities ?? {},
          exposures: run.exposures,
        };
        history.push(entry);
        await recordActivity(tx, {
          projectId: x.project_id,
          userId: null,
          scope: 'Experiment',
          itemId: String(x.id),
          activity: 'bandit_reallocated',
          detail: {
            name: x.name,
            changes: [
              { type: 'FeatureFlag', action: 'changed', field: 'rollout_percentage', before, after: run.weights },
            ],
            trigger: {
              job: 'bandit-reallocation',
              metric_uuid: run.metric_uuid,
              probabilities: run.probabilities,
              exposures: run.exposures,
              at: entry.at,
            },
          },
        });
        reallocated = true;
      } else result = { ...run, status: 'unchanged', weights: before };
    }
    const json = (v: unknown) => sql<never>`${JSON.stringify(v)}::jsonb`;
    await db(tx)
      .insertInto('experiment_bandit')
      .values({ experiment_id: x.id, checked_at: now, result: json(result), history: json(history) })
      .onConflict((oc) =>
        oc.column('experiment_id').doUpdateSet((eb) => ({
          checked_at: eb.ref('excluded.checked_at'),
          result: eb.ref('excluded.result'),
          history: eb.ref('excluded.history'),
          updated_at: sql<Date>`now()`,
        })),
      )
      .execute();
    return reallocated;
  });
}

/**
 * The `bandit` section of an experiment's results: its allocation settings, the last run (current
 * weights, probabilities, the period-weighted estimates), and the reallocations. Null when the
 * experiment does not allocate adaptively, or `metricUuid` is not the metric it allocates on.
 */
export async function banditSummary(
  em: EntityManager,
  experiment: { id: number; parameters: unknown },
  metricUuid?: string,
) {
  const config = allocationOf(experiment.parameters);
  if (!config) return null;
  const state = await db(em)
    .selectFrom('experiment_bandit')
    .select(['checked_at', 'result', 'history'])
    .where('experiment_id', '=', experiment.id)
    .executeTakeFirst();
  const allocatedOn = record(state?.result).metric_uuid;
  if (metricUuid !== undefined && typeof allocatedOn === 'string' && allocatedOn !== metricUuid) return null;
  return {
    allocation: config,
    checked_at: state ? new Date(state.checked_at).toISOString() : null,
    estimate_method: 'batched_ols',
    ...(state ? record(state.result) : { status: 'pending' }),
    history: state?.history ?? [],
  };
}
