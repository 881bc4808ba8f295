// Experiment results: for each running experiment and each of its metrics, one cumulative result
// per day from the start date (as of the next midnight UTC), stored for timeseries_results.
// Days already completed are kept; the current day is recomputed on every run. All days a run needs
// come from one pass over the experiment's events (shared/experiments/results.ts), so a backfill of
// N days costs about what one day costs, not N times it.
import type { Job } from 'bullmq';
import { computeExperimentSeries, experimentForResults, type MetricResult } from '../../shared/experiments/results.ts';
import type { WorkerDeps } from '../deps.ts';
import { rows, run } from '../../shared/db/sql.ts';

const DAY = 86400_000;

export async function computeExperimentResults(
  job: Job<{ experimentId?: number }>,
  deps: WorkerDeps,
  now = new Date(),
): Promise<{ experiments: number; results: number }> {
  const em = deps.orm.em.fork();
  const only = job.data?.experimentId;
  const experiments = await rows<any>(
    em,
    `select x.*, f.key as flag_key, f.filters as flag_filters from experiment x join feature_flag f on f.id = x.feature_flag_id
      where not x.deleted and x.start_date is not null and x.start_date <= now() ${only ? 'and x.id = ?' : "and (x.end_date is null or x.end_date > now() - interval '1 day')"}`,
    only ? [only] : [],
  );
  let results = 0;
  for (const x of experiments) {
    const experiment = experimentForResults(x);
    const { correction } = experiment;
    const end = new Date(Math.min(now.getTime(), x.end_date ? new Date(x.end_date).getTime() : now.getTime()));
    const firstDay = Date.UTC(
      experiment.startDate.getUTCFullYear(),
      experiment.startDate.getUTCMonth(),
      experiment.startDate.getUTCDate(),
    );
    const pending: { metric: any; days: { index: number; text: string }[] }[] = [];
    for (const metric of [...(x.metrics ?? []), ...(x.metrics_secondary ?? [])]) {
      if (!metric?.uuid || !metric?.fingerprint) continue;
      const done = new Set(
        (
          await rows<any>(
            em,
            `select day::text as day from experiment_metric_result where experiment_id = ? and metric_uuid = ? and fingerprint = ? and status = 'completed'`,
            [x.id, metric.uuid, metric.fingerprint],
          )
        ).map((r) => r.day),
      );
      const days: { index: number; text: string }[] = [];
      for (let day = firstDay, index = 0; day <= end.getTime(); day += DAY, index++) {
        const text = new Date(day).toISOString().slice(0, 10);
        const isToday = day + DAY > now.getTime();
        if (!done.has(text) || isToday) days.push({ index, text });
      }
      pending.push({ metric, days });
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
    // Every day's cumulative result from one pass over the events, however many days are missing
    // (a backfill, or the days a stopped worker skipped); the current day is always recomputed.
    let computed: (MetricResult[] | Error)[];
    try {
      const until = new Date(end.getTime() + 1);
      computed = await computeExperimentSeries(
        em,
        experiment,
        pending.map((p) => p.metric),
        until,
      );
    } catch (e) {
      computed = pending.map(() => e as Error);
    }
    for (const [i, { metric, days }] of pending.entries()) {
      const series = computed[i];
      const dayResults = days.map((d) =>
        series instanceof Error
          ? { day: d.text, status: 'failed', result: null, error: series.message }
          : { day: d.text, status: 'completed', result: series[d.index], error: null },
      );
      await run(
        em,
        `insert into experiment_metric_result
           (experiment_id, metric_uuid, fingerprint, day, status, result, error_message, computed_at)
         select ?, ?, ?, r.day, r.status, r.result, r.error, now()
           from jsonb_to_recordset(?::jsonb) as r(day date, status text, result jsonb, error text)
         on conflict (experiment_id, metric_uuid, fingerprint, day) do update
           set status = excluded.status, result = excluded.result, error_message = excluded.error_message,
               computed_at = now(), updated_at = now()`,
        [x.id, metric.uuid, metric.fingerprint, JSON.stringify(dayResults)],
      );
      results += dayResults.length;
    }
  }
  deps.logger.info({ experiments: experiments.length, results }, 'experiment results computed');
  return { experiments: experiments.length, results };
}
