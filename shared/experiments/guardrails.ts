// Guardrail metrics and the circuit breaker. An experiment declares guardrails in
// stats_config.guardrails ([{metric_uuid, direction, tolerated_harm, min_exposures}]); the worker
// checks them every few minutes (GUARDRAIL_CHECK_CRON) with an always-valid interval on the relative
// effect (sequential.ts), and when stats_config.circuit_breaker.enabled is true and a treatment's
// interval lies wholly beyond the tolerated harm, one transaction sets the flag to serve control to
// everyone (its filters before are kept), annotates the experiment (guardrail_status) and writes the
// activity log; the reset restores the flag.
//
// A check costs the change since the last stored day, not a recompute: the results job stores each
// metric's cumulative counts per day (experiment_metric_result); the check takes the latest day whose
// row was computed after that day had ended, and adds the change since then, computed from the events
// since and the stored state of their persons as of that day (results.ts, computeCountsSince; persons
// merged since with earlier events make it compute from the start). Approximation: a late event for
// an earlier day counts once the daily run has recomputed for it.
import type { EntityManager } from '@mikro-orm/postgresql';
import type { EventStore } from '../events/index.ts';
import { recordActivity } from '../platform/activity-log.ts';
import { sql } from 'kysely';
import { db } from '../platform/db/kysely.ts';
import {
  computeCountsSince,
  type ExperimentForResults,
  type ExperimentMetric,
  type ExperimentRow,
  metricShape,
  metricsOf,
  startedExperiments,
} from './results.ts';
import { alwaysValidInterval, relativeEffectEstimate, sequentialRho2 } from './sequential.ts';
import { type MetricStats, normalQuantile } from './stats.ts';
import type { MetricKind, VariantStats } from './moments.ts';
import { updateFlagFilters } from './store.ts';
import { queueWebhookEvents } from '../webhooks/index.ts';

export const GUARDRAIL_DIRECTIONS = ['increase_is_bad', 'decrease_is_bad'] as const;
export type GuardrailDirection = (typeof GUARDRAIL_DIRECTIONS)[number];
/** Exposures each of control and the treatment needs before a guardrail is judged, unless set. */
export const DEFAULT_GUARDRAIL_MIN_EXPOSURES = 100;
/** The always-valid interval's level: 1 − α = 95%. */
export const GUARDRAIL_ALPHA = 0.05;

export interface Guardrail {
  metric_uuid: string;
  direction: GuardrailDirection;
  /** Relative harm tolerated, in (0, 1): 0.05 = a 5% change in the bad direction. */
  tolerated_harm: number;
  min_exposures?: number;
}

export interface GuardrailCheck {
  metric_uuid: string;
  variant: string;
  direction: GuardrailDirection;
  tolerated_harm: number;
  exposures: { control: number; treatment: number };
  /** Relative effect (μT − μC)/μC and its always-valid interval, or null before there is enough data. */
  estimate: number | null;
  interval: [number, number] | null;
  /**
   * harmful: the interval lies wholly beyond the tolerated harm; within_tolerance: its bad end is
   * within it (harm beyond the tolerance is ruled out); inconclusive: it holds the tolerated harm, so it
   * decides neither (too few exposures for its width, or no planned sample to tune it to).
   */
  status: 'harmful' | 'within_tolerance' | 'inconclusive' | 'not_enough_exposures' | 'no_data';
  /**
   * Exposures per arm at which the same interval would decide (see exposuresToDecide), when it does not
   * decide yet (inconclusive, not_enough_exposures); null when decided or without data.
   */
  needed_per_arm: number | null;
}

export function guardrailsOf(statsConfig: unknown): Guardrail[] {
  const list = (statsConfig as { guardrails?: unknown } | null)?.guardrails;
  return Array.isArray(list) ? list.filter((g) => g && typeof g.metric_uuid === 'string') : [];
}

export const circuitBreakerEnabled = (statsConfig: unknown) =>
  (statsConfig as { circuit_breaker?: { enabled?: unknown } } | null)?.circuit_breaker?.enabled === true;

/**
 * The breaker's rule on one interval of the relative effect: the whole interval beyond the tolerated
 * harm h in the bad direction (lower bound > h when an increase is bad, upper bound < −h when a
 * decrease is). Exported for the simulations (shared/experiments/guardrail-simulation.ts).
 */
export const beyondTolerance = (direction: GuardrailDirection, h: number, [lower, upper]: [number, number]) =>
  direction === 'increase_is_bad' ? lower > h : upper < -h;

/** The interval's bad end within the tolerated harm h: harm beyond h is ruled out (upper ≤ h, or lower ≥ −h). */
export const withinTolerance = (direction: GuardrailDirection, h: number, [lower, upper]: [number, number]) =>
  direction === 'increase_is_bad' ? upper <= h : lower >= -h;

/** Exposures per arm past which exposuresToDecide stops looking (reported as this cap). */
export const GUARDRAIL_MAX_NEEDED_PER_ARM = 1e9;

/**
 * The exposures per arm at which the always-valid interval (scale τ, level α) would decide the
 * guardrail, at the current estimate θ̂ and per-person variance: the relative effect's variance falls
 * as 1/n, V(n) = V·n₀/n (n₀ the current exposures per arm, the mean of the two arms), and τ does not
 * depend on n (the tolerated harm, or the planned sample's τ), so the half-width w(n) of
 * alwaysValidInterval falls with n; the answer is the least n with w(n) < d, d the distance from the
 * (oriented) estimate to the tolerated harm h, at least h/2 (an estimate at the boundary needs the
 * sample that resolves half the tolerance). Found by bisection (w is monotone in n). At that sample the
 * interval lies beyond h (harm) or inside it (within tolerance) if the estimate holds.
 */
export function exposuresToDecide(
  direction: GuardrailDirection,
  h: number,
  estimate: number,
  variance: number,
  perArm: number,
  tau: number,
  alpha = GUARDRAIL_ALPHA,
): number {
  const bad = direction === 'increase_is_bad' ? estimate : -estimate;
  const d = Math.max(Math.abs(bad - h), h / 2);
  const half = (n: number) => {
    const ci = alwaysValidInterval(0, (variance * perArm) / n, tau, alpha);
    return ci.upper;
  };
  if (!(d > 0) || !(variance > 0) || !(perArm > 0)) return GUARDRAIL_MAX_NEEDED_PER_ARM;
  let lo = perArm;
  let hi = Math.max(perArm * 2, 2);
  while (half(hi) >= d) {
    if (hi >= GUARDRAIL_MAX_NEEDED_PER_ARM) return GUARDRAIL_MAX_NEEDED_PER_ARM;
    lo = hi;
    hi = Math.min(hi * 2, GUARDRAIL_MAX_NEEDED_PER_ARM);
  }
  if (half(lo) < d) return Math.ceil(lo);
  while (hi - lo > 1) {
    const mid = Math.floor((lo + hi) / 2);
    if (half(mid) < d) hi = mid;
    else lo = mid;
  }
  return Math.ceil(hi);
}

/**
 * One guardrail against every treatment: harmful when the always-valid interval of the relative
 * effect lies wholly beyond the tolerated harm in the bad direction (lower bound > h when an increase
 * is bad, upper bound < −h when a decrease is), with at least min_exposures in control and treatment;
 * within_tolerance only when its bad end is within the tolerated harm; otherwise inconclusive, with
 * the exposures per arm it needs to decide (issue #46: an interval of −2667% to +3467% is no verdict).
 * The mixture scale τ: see guardrailTau (tuned to `plannedPerArm` when the experiment plans one).
 */
export function evaluateGuardrail(
  guardrail: Guardrail,
  kind: MetricKind,
  variants: VariantStats[],
  baselineKey: string,
  alpha = GUARDRAIL_ALPHA,
  plannedPerArm: number | null = null,
): GuardrailCheck[] {
  const control = variants.find((v) => v.key === baselineKey);
  const minimum = guardrail.min_exposures ?? DEFAULT_GUARDRAIL_MIN_EXPOSURES;
  const h = guardrail.tolerated_harm;
  return variants
    .filter((v) => v.key !== baselineKey)
    .map((treatment) => {
      const base = {
        metric_uuid: guardrail.metric_uuid,
        variant: treatment.key,
        direction: guardrail.direction,
        tolerated_harm: h,
        exposures: { control: control?.number_of_samples ?? 0, treatment: treatment.number_of_samples },
      };
      const effect = control ? relativeEffectEstimate(treatment, control, kind) : null;
      if (!effect || !(effect.variance > 0))
        return { ...base, estimate: null, interval: null, status: 'no_data', needed_per_arm: null };
      const exposures = base.exposures.control + base.exposures.treatment;
      const tau = guardrailTau(h, effect.variance, exposures, plannedPerArm, alpha);
      const ci = alwaysValidInterval(effect.estimate, effect.variance, tau, alpha);
      const interval: [number, number] = [ci.lower, ci.upper];
      const decided =
        beyondTolerance(guardrail.direction, h, interval) || withinTolerance(guardrail.direction, h, interval);
      const toDecide = () =>
        exposuresToDecide(guardrail.direction, h, effect.estimate, effect.variance, exposures / 2, tau, alpha);
      if (base.exposures.control < minimum || base.exposures.treatment < minimum) {
        const needed = Math.max(minimum, decided ? 0 : toDecide());
        return { ...base, estimate: effect.estimate, interval, status: 'not_enough_exposures', needed_per_arm: needed };
      }
      if (beyondTolerance(guardrail.direction, h, interval))
        return { ...base, estimate: effect.estimate, interval, status: 'harmful', needed_per_arm: null };
      if (withinTolerance(guardrail.direction, h, interval))
        return { ...base, estimate: effect.estimate, interval, status: 'within_tolerance', needed_per_arm: null };
      return { ...base, estimate: effect.estimate, interval, status: 'inconclusive', needed_per_arm: toDecide() };
    });
}

/** c = τ²/V at the planned sample: the mixture whose interval is narrowest there (sequential.ts's ρ² · N*). */
const tightestAt = (alpha: number) => sequentialRho2(alpha, 1);

/**
 * The mixture scale τ of the always-valid interval. Without a planned sample, the tolerated harm h
 * (the interval is tightest for effects of that size). With one (exposures per arm), τ² = c·V·n/(2N):
 * the asymptotic confidence sequence of sequential.ts with N* = 2N (both arms), narrowest when the
 * planned sample is reached, which is where a harm must be caught. τ = h is tuned to effects far
 * smaller than a planned sample can resolve, and its interval there is ~1.7× as wide.
 */
export function guardrailTau(
  h: number,
  variance: number,
  exposures: number,
  plannedPerArm: number | null,
  alpha = GUARDRAIL_ALPHA,
): number {
  if (!plannedPerArm || !(plannedPerArm > 0) || !(exposures > 0)) return h;
  return Math.sqrt((tightestAt(alpha) * variance * exposures) / (2 * plannedPerArm));
}

/**
 * The planned sample a guardrail needs (exposures per arm): the interval tuned to it (guardrailTau)
 * lies beyond the tolerated harm h at the planned sample's last look with probability `power` when
 * the true harm is δ: (w + z_power)² · V₁/(δ − h)², w = sqrt((1 + 1/c)(2 ln(1/α) + ln(1 + c))) the
 * interval's half-width in standard errors there (3.03 at α = 0.05), V₁ the relative effect's
 * variance times the exposures per arm. The looks before add to it, so this is conservative. A
 * fixed-horizon calculator's n₈₀ (z₀.₉₇₅ + z₀.₈ = 2.80 standard errors to δ, not 3.88 to δ − h) is
 * about 3 × smaller for δ = 5%, h = 1%: at n₈₀ the breaker stops such a harm in a minority of runs.
 */
export function guardrailPlannedSamplePerArm(
  unitVariance: number,
  harm: number,
  toleratedHarm: number,
  alpha = GUARDRAIL_ALPHA,
  power = 0.8,
): number {
  const c = tightestAt(alpha);
  const w = Math.sqrt((1 + 1 / c) * (-2 * Math.log(alpha) + Math.log(1 + c)));
  const z = w + normalQuantile(power);
  return Math.ceil((z * z * unitVariance) / (harm - toleratedHarm) ** 2);
}

/**
 * The experiment's planned exposures per variant, when it has a plan: PostHog's
 * parameters.recommended_sample_size is the persons of all variants together (its progress bar
 * divides the exposed persons by it), split evenly over the variants here.
 */
export function plannedExposuresPerArm(parameters: unknown, variants: number): number | null {
  const n = (parameters as { recommended_sample_size?: unknown } | null)?.recommended_sample_size;
  return typeof n === 'number' && Number.isFinite(n) && n > 0 && variants > 0 ? n / variants : null;
}

const DAY = 86400_000;

/**
 * The metrics' cumulative counts as of `now`: the latest stored complete day D (all of these
 * metrics', current fingerprints) plus the change since D's end from the events since and their
 * persons' stored state (results.ts, computeCountsSince, which also computes in full after a deletion,
 * a retention run or a merge since; a late event for an earlier day counts from the daily run that
 * recomputes for it). The state is not advanced here (the daily run does that). Without
 * such a day, a full computation (`baseDay` null).
 */
export async function currentCounts(
  em: EntityManager,
  events: EventStore,
  experiment: ExperimentForResults,
  metrics: readonly ExperimentMetric[],
  now: Date,
): Promise<{ counts: (MetricStats | Error)[]; baseDay: string | null }> {
  const start = experiment.startDate;
  const firstDay = Date.UTC(start.getUTCFullYear(), start.getUTCMonth(), start.getUTCDate());
  const lastDay = Math.max(0, Math.ceil((now.getTime() - firstDay) / DAY) - 1);
  // Late events are left to the daily run: looking for them reads a day's inserted events.
  const since = await computeCountsSince(em, events, experiment, metrics, now, lastDay, { lateEvents: false });
  const counts = since.series.map((c, i) =>
    c instanceof Error ? c : (c.at(-1) ?? emptyStats(metrics[i], experiment)),
  );
  return { counts, baseDay: since.baseDay };
}

function emptyStats(metric: ExperimentMetric, experiment: ExperimentForResults): MetricStats {
  return {
    kind: metricShape(metric)?.kind ?? 'mean',
    variants: experiment.variants.map((key) => ({ key, number_of_samples: 0, sum: 0, sum_squares: 0 })),
  };
}

/** The experiment's guardrails checked as of `now`. */
export async function checkGuardrails(
  em: EntityManager,
  events: EventStore,
  experiment: ExperimentForResults,
  row: ExperimentRow,
  now: Date,
): Promise<{ checks: GuardrailCheck[]; baseDay: string | null; errors: string[] }> {
  const guardrails = guardrailsOf(row.stats_config);
  const all = [...metricsOf(row.metrics), ...metricsOf(row.metrics_secondary)];
  const metrics = [...new Set(guardrails.map((g) => g.metric_uuid))]
    .map((uuid) => all.find((m) => m.uuid === uuid))
    .filter(
      (m): m is ExperimentMetric =>
        !!m && !!metricShape(m) && metricShape(m)?.kind !== 'ratio' && metricShape(m)?.kind !== 'retention',
    );
  if (!metrics.length) return { checks: [], baseDay: null, errors: [] };
  const { counts, baseDay } = await currentCounts(em, events, experiment, metrics, now);
  const checks: GuardrailCheck[] = [];
  const errors: string[] = [];
  for (const g of guardrails) {
    const i = metrics.findIndex((m) => m.uuid === g.metric_uuid);
    const c = counts[i];
    if (i < 0 || !c) continue;
    if (c instanceof Error) {
      errors.push(`${g.metric_uuid}: ${c.message}`);
      continue;
    }
    const planned = plannedExposuresPerArm(row.parameters, experiment.variants.length);
    checks.push(...evaluateGuardrail(g, c.kind, c.variants, experiment.baselineKey, GUARDRAIL_ALPHA, planned));
  }
  return { checks, baseDay, errors };
}

const record = (x: unknown): Record<string, unknown> =>
  x && typeof x === 'object' ? (x as Record<string, unknown>) : {};

/** The experiment and its flag's filters, both rows locked (the trip and the reset change both). */
const lockedExperiment = (tx: EntityManager, experimentId: number) =>
  db(tx)
    .selectFrom('experiment as x')
    .innerJoin('feature_flag as f', 'f.id', 'x.feature_flag_id')
    .select([
      'x.id',
      'x.project_id',
      'x.name',
      'x.stats_config',
      'x.guardrail_status',
      'x.feature_flag_id',
      'f.filters',
    ])
    .where('x.id', '=', experimentId)
    .forUpdate(['x', 'f'])
    .executeTakeFirst();

/** The flag's filters serving `baselineKey` to every person: one 100% condition, no holdout. */
export function controlOnlyFilters(filters: Record<string, unknown>, baselineKey: string): Record<string, unknown> {
  const multivariate = record(filters?.multivariate);
  const variants = Array.isArray(multivariate.variants) ? multivariate.variants.map(record) : [];
  return {
    ...filters,
    groups: [{ properties: [], rollout_percentage: 100, variant: baselineKey }],
    multivariate: {
      ...multivariate,
      variants: variants.map((v) => ({ ...v, rollout_percentage: v.key === baselineKey ? 100 : 0 })),
    },
    holdout: null,
    holdout_groups: null,
  };
}

const describeCheck = (c: GuardrailCheck) => {
  const pct = (x: number) => `${(x * 100).toFixed(2)}%`;
  const [lo, hi] = c.interval!;
  const bad = c.direction === 'increase_is_bad' ? 'increase' : 'decrease';
  return (
    `Guardrail metric ${c.metric_uuid}: variant ${c.variant} changes it by ${pct(c.estimate!)} relative to control ` +
    `(always-valid ${Math.round((1 - GUARDRAIL_ALPHA) * 100)}% interval [${pct(lo)}, ${pct(hi)}]), ` +
    `a larger ${bad} than the tolerated ${pct(c.tolerated_harm)}.`
  );
};

/**
 * Records a check: the last verdict in guardrail_status, and, when a guardrail is harmful and the
 * circuit breaker is on, the trip (flag to control for everyone, the annotation, the activity log
 * entry, the experiment.guardrail_tripped webhook event) in one transaction. Returns the webhook
 * deliveries to hand over after the commit when this call tripped it, else null.
 */
export async function recordGuardrailCheck(
  em: EntityManager,
  experimentId: number,
  result: { checks: GuardrailCheck[]; baseDay: string | null; errors: string[] },
  now: Date,
): Promise<string[] | null> {
  return em.transactional(async (tx) => {
    const x = await lockedExperiment(tx, experimentId);
    if (!x || x.guardrail_status?.state === 'tripped') return null;
    const check = {
      checked_at: now.toISOString(),
      base_day: result.baseDay,
      checks: result.checks,
      errors: result.errors,
    };
    const harmful = result.checks.find((c) => c.status === 'harmful');
    if (!harmful || !circuitBreakerEnabled(x.stats_config)) {
      const undecided = result.checks.some((c) => c.status === 'inconclusive' || c.status === 'not_enough_exposures');
      const state = harmful ? 'harmful' : undecided ? 'inconclusive' : 'ok';
      await mergeGuardrailStatus(tx, x.id, { state, last_check: check });
      return null;
    }
    const baseline = x.stats_config?.baseline_variant_key;
    const baselineKey = typeof baseline === 'string' ? baseline : 'control';
    const reason = describeCheck(harmful);
    const trip = {
      tripped_at: now.toISOString(),
      metric_uuid: harmful.metric_uuid,
      variant: harmful.variant,
      reason,
      estimate: harmful.estimate,
      interval: harmful.interval,
      exposures: harmful.exposures,
    };
    const filters = controlOnlyFilters(x.filters, baselineKey);
    await updateFlagFilters(tx, x.feature_flag_id, filters, false);
    const status = { state: 'tripped', last_check: check, trip, previous_flag_filters: x.filters };
    await mergeGuardrailStatus(tx, x.id, status);
    return notifyGuardrailTripped(tx, x.project_id, {
      experiment: { id: x.id, name: x.name },
      feature_flag: { id: x.feature_flag_id, before: x.filters, after: filters },
      ...trip,
    });
  });
}

export interface GuardrailTrippedPayload {
  experiment: { id: number; name: string };
  feature_flag: { id: number; before: unknown; after: unknown };
  tripped_at: string;
  metric_uuid: string;
  variant: string;
  reason: string;
  estimate: number | null;
  interval: [number, number] | null;
}

/**
 * Tells the world a guardrail tripped, in the trip's transaction: the activity log and the signed
 * experiment.guardrail_tripped webhook event; returns the deliveries to hand over after the commit.
 */
export async function notifyGuardrailTripped(
  tx: EntityManager,
  projectId: number,
  payload: GuardrailTrippedPayload,
): Promise<string[]> {
  await recordActivity(tx, {
    projectId,
    userId: null,
    scope: 'Experiment',
    itemId: String(payload.experiment.id),
    activity: 'guardrail_tripped',
    detail: {
      name: payload.experiment.name,
      changes: [
        {
          type: 'FeatureFlag',
          action: 'changed',
          field: 'filters',
          before: payload.feature_flag.before,
          after: payload.feature_flag.after,
        },
      ],
      trigger: {
        job: 'guardrail-check',
        reason: payload.reason,
        metric_uuid: payload.metric_uuid,
        variant: payload.variant,
        interval: payload.interval,
        tripped_at: payload.tripped_at,
      },
    },
  });
  return queueWebhookEvents(tx, projectId, 'experiment.guardrail_tripped', () => [
    payload as unknown as Record<string, unknown>,
  ]);
}

/**
 * The reset: the flag's filters as before the trip, the circuit breaker off (so the next check does
 * not trip it again at once; turn it back on with stats_config.circuit_breaker), the trip kept as
 * last_trip. False when the experiment's breaker has not tripped.
 */
export async function resetCircuitBreaker(
  em: EntityManager,
  experimentId: number,
  actor: { projectId: number; organizationId: string; userId: number },
): Promise<boolean> {
  return em.transactional(async (tx) => {
    const x = await lockedExperiment(tx, experimentId);
    if (x?.guardrail_status?.state !== 'tripped') return false;
    const previous = record(x.guardrail_status.previous_flag_filters);
    await updateFlagFilters(tx, x.feature_flag_id, previous, false);
    const statsConfig = {
      ...(x.stats_config ?? {}),
      circuit_breaker: { ...record(x.stats_config?.circuit_breaker), enabled: false },
    };
    const status = {
      state: 'reset',
      reset_at: new Date().toISOString(),
      last_check: x.guardrail_status.last_check ?? null,
      last_trip: x.guardrail_status.trip,
    };
    await db(tx)
      .updateTable('experiment')
      .set({
        guardrail_status: sql<Record<string, unknown>>`${JSON.stringify(status)}::jsonb`,
        stats_config: sql<Record<string, unknown>>`${JSON.stringify(statsConfig)}::jsonb`,
        updated_at: sql<Date>`now()`,
      })
      .where('id', '=', x.id)
      .execute();
    await recordActivity(tx, {
      ...actor,
      scope: 'Experiment',
      itemId: String(x.id),
      activity: 'guardrail_reset',
      detail: {
        name: x.name,
        changes: [{ type: 'FeatureFlag', action: 'changed', field: 'filters', before: x.filters, after: previous }],
      },
    });
    return true;
  });
}

/** The running experiments with guardrails whose breaker has not tripped (one, with `only`). */
export function experimentsToGuard(em: EntityManager, only?: number) {
  const running = startedExperiments(em)
    .where((eb) => eb.or([eb('x.end_date', 'is', null), eb('x.end_date', '>', sql<Date>`now()`)]))
    .where(
      sql<boolean>`jsonb_typeof(x.stats_config->'guardrails') = 'array' and jsonb_array_length(x.stats_config->'guardrails') > 0`,
    )
    .where(sql<boolean>`(x.guardrail_status->>'state') is distinct from 'tripped'`)
    .orderBy('x.id');
  return (only ? running.where('x.id', '=', only) : running).execute();
}

/** Merges `fields` into the experiment's guardrail_status (created when there is none). */
const mergeGuardrailStatus = (tx: EntityManager, experimentId: number, fields: Record<string, unknown>) =>
  db(tx)
    .updateTable('experiment')
    .set({
      guardrail_status: sql<
        Record<string, unknown>
      >`coalesce(guardrail_status, '{}') || ${JSON.stringify(fields)}::jsonb`,
    })
    .where('id', '=', experimentId)
    .execute();
