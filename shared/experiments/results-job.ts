// Experiment results: for each running experiment and each of its metrics, one cumulative result
// per day from the start date (as of the next midnight UTC), stored for timeseries_results.
// A day is done once a run computed it after it ended; the current day (and any day not done) is
// computed on every run. The daily run is incremental: it continues the latest stored complete day
// with the change since then, from the events since and the per-person state as of that day's end
// (shared/experiments/results.ts, computeSeriesSince), so it costs about one day's events however
// long the experiment has run; the state is advanced to the last complete day in the transaction that
// stores the days. It computes from the start instead (rebuilding the state) when no such day or
// state is stored, when earlier days are missing (a new or changed metric, a backfill), or when late
// events, a deletion, a retention run or a merge of persons touched the stored days; all days a full
// run needs come from one pass over the experiment's events.
import type { Job } from 'bullmq';
import { sql } from 'kysely';
import { db } from '../platform/db/kysely.ts';
import {
  computeSeriesSince,
  type ExperimentMetric,
  startedExperiments,
  experimentForResults,
  type MetricResult,
  metricsOf,
  type RecomputeReason,
} from './results.ts';
import { percentileShape } from './percentile.ts';
import { computePercentileSeries } from './percentile-results.ts';
import type { JobData } from '../platform/jobs.ts';
import type { EventStoreDeps } from '../events/index.ts';
import type { Deps } from '../platform/deps.ts';

/** What the worker hands this job: the platform's dependencies and the event store. */
type JobDeps = Deps & EventStoreDeps;

const DAY = 86400_000;

// (in_engine: computed from the start every run, so every day is written again, as after a stale one.)
const STALE = new Set<RecomputeReason>(['late_events', 'deletion', 'retention', 'persons_merged', 'in_engine']);

type StoredMetric = ExperimentMetric & { uuid: string; fingerprint: string };

export async function computeExperimentResults(
  job: Job<JobData['experimentResults']>,
  deps: JobDeps,
  now = new Date(),
): Promise<{ experiments: number; results: number; incremental: number; full: number }> {
  const em = deps.orm.em.fork();
  const only = job.data?.experimentId;
  const started = startedExperiments(em);
  const experiments = await (only
    ? started.where('x.id', '=', only)
    : started.where((eb) =>
        eb.or([eb('x.end_date', 'is', null), eb('x.end_date', '>', sql<Date>`now() - interval '1 day'`)]),
      )
  ).execute();
  let results = 0;
  let incremental = 0;
  let full = 0;
  for (const x of experiments) {
    const experiment = experimentForResults(x);
    const { correction } = experiment;
    const end = new Date(Math.min(now.getTime(), x.end_date ? new Date(x.end_date).getTime() : now.getTime()));
    const firstDay = Date.UTC(
      experiment.startDate.getUTCFullYear(),
      experiment.startDate.getUTCMonth(),
      experiment.startDate.getUTCDate(),
    );
    const metrics = [...metricsOf(x.metrics), ...metricsOf(x.metrics_secondary)].filter(
      (m): m is StoredMetric => typeof m.uuid === 'string' && typeof m.fingerprint === 'string',
    );
    // The days done: computed (completed) after they ended.
    const done = metrics.length
      ? await db(em)
          .selectFrom('experiment_metric_result')
          .select(['metric_uuid', 'fingerprint', sql<string>`day::text`.as('day')])
          .where('experiment_id', '=', x.id)
          .where('status', '=', 'completed')
          .where(sql<boolean>`computed_at >= (day + 1)::timestamp at time zone 'UTC'`)
          .execute()
      : [];
    const allDays: { index: number; text: string }[] = [];
    for (let day = firstDay, index = 0; day <= end.getTime(); day += DAY, index++) {
      allDays.push({ index, text: new Date(day).toISOString().slice(0, 10) });
    }
    const pending: { metric: StoredMetric; days: { index: number; text: string }[] }[] = [];
    for (const metric of metrics) {
      const doneDays = new Set(
        done.filter((r) => r.metric_uuid === metric.uuid && r.fingerprint === metric.fingerprint).map((r) => r.day),
      );
      pending.push({ metric, days: allDays.filter((d) => !doneDays.has(d.text)) });
    }
    // A correction over the whole experiment tests every metric's comparisons of a day together:
    // then each day any metric needs is computed, and stored, for all of them.
    if (correction?.scope === 'experiment' && pending.some((p) => p.days.length)) {
      const union = new Map(pending.flatMap((p) => p.days.map((d) => [d.index, d] as const)));
      const days = [...union.values()].sort((a, b) => a.index - b.index);
      for (const p of pending) p.days = days;
    } else {
      pending.splice(0, pending.length, ...pending.filter((p) => p.days.length));
    }
    if (pending.length === 0) continue;
    const fromDay = Math.min(...pending.flatMap((p) => p.days.map((d) => d.index)));
    // The days and the per-person state they continue from are stored together: one transaction.
    results += await em.transactional(async (tx) => {
      let computed: (MetricResult[] | Error)[];
      let seriesStart = 0;
      let stored = 0;
      // Percentile metrics (percentile-results.ts) are computed apart, from the start, after the others.
      const percentiles = pending.filter((p) => percentileShape(p.metric));
      const others = pending.filter((p) => !percentileShape(p.metric));
      pending.splice(0, pending.length, ...others, ...percentiles);
      try {
        const until = new Date(end.getTime() + 1);
        const since = others.length
          ? await computeSeriesSince(
              tx,
              deps.events,
              experiment,
              others.map((p) => p.metric),
              until,
              fromDay,
              { saveState: true },
            )
          : { series: [], firstDay: 0, baseDay: null, recomputed: null };
        computed = since.series;
        seriesStart = since.firstDay;
        if (!others.length)
          full++; // (percentile metrics alone: computed from the start)
        else if (since.recomputed) full++;
        else incremental++;
        // The stored days may be wrong (late events, a deletion, a retention run, persons merged): all are rewritten.
        if (since.recomputed && STALE.has(since.recomputed)) for (const p of pending) p.days = allDays;
        deps.logger.debug(
          { experimentId: x.id, baseDay: since.baseDay, recomputed: since.recomputed },
          'experiment results: from a stored day, or from the start',
        );
      } catch (e) {
        computed = others.map(() => e as Error);
      }
      // Each percentile metric's days, indexed from day 0.
      const percentileSeries: (unknown[] | Error)[] = [];
      for (const p of percentiles) {
        try {
          const until = new Date(end.getTime() + 1);
          const indexes = p.days.map((d) => d.index);
          const series = await computePercentileSeries(tx, deps.events, experiment, p.metric, until, indexes);
          const byDay: unknown[] = [];
          if (!(series instanceof Error)) for (const [i, d] of indexes.entries()) byDay[d] = series[i];
          percentileSeries.push(series instanceof Error ? series : byDay);
        } catch (e) {
          percentileSeries.push(e as Error);
        }
      }
      for (const [i, { metric, days }] of pending.entries()) {
        const isPercentile = i >= others.length;
        const series = isPercentile ? percentileSeries[i - others.length] : computed[i];
        const offset = isPercentile ? 0 : seriesStart;
        const dayResults = days.map((d) =>
          series instanceof Error
            ? { day: d.text, status: 'failed', result: null, error: series.message }
            : { day: d.text, status: 'completed', result: series[d.index - offset], error: null },
        );
        // computed_at is the run's as-of time: a day's row computed after the day ended is complete.
        await db(tx)
          .insertInto('experiment_metric_result')
          .values(
            dayResults.map((r) => ({
              experiment_id: x.id,
              metric_uuid: metric.uuid,
              fingerprint: metric.fingerprint,
              day: sql<string>`${r.day}::date`,
              status: r.status,
              result: sql<Record<
                string,
                unknown
              > | null>`${r.result === null ? null : JSON.stringify(r.result)}::jsonb`,
              error_message: r.error,
              computed_at: now,
            })),
          )
          .onConflict((oc) =>
            oc.columns(['experiment_id', 'metric_uuid', 'fingerprint', 'day']).doUpdateSet((eb) => ({
              status: eb.ref('excluded.status'),
              result: eb.ref('excluded.result'),
              error_message: eb.ref('excluded.error_message'),
              computed_at: eb.ref('excluded.computed_at'),
              updated_at: sql<Date>`now()`,
            })),
          )
          .execute();
        stored += dayResults.length;
      }
      return stored;
    });
  }
  deps.logger.info({ experiments: experiments.length, results, incremental, full }, 'experiment results computed');
  return { experiments: experiments.length, results, incremental, full };
}
