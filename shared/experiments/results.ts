// Computing an experiment metric from events (spec A2–A3): exposures are persons with
// `$feature_flag_called` for the flag (variant from `$feature_flag_response`; persons seen in
// more than one variant are excluded), then the metric over each person's events after their first
// exposure. Results are cumulative from the start date to `asOf`, as PostHog's timeseries are.
import type { EntityManager } from '@mikro-orm/postgresql';
import { compareVariants, type ExperimentResult, type MetricKind, type VariantStats } from './stats.ts';

export interface ExperimentForResults {
  id: number;
  projectId: number;
  flagKey: string;
  variants: string[];
  startDate: Date;
  statsMethod: 'bayesian' | 'frequentist';
  baselineKey: string;
}

/** The events a metric counts: mean → one source event; funnel → ordered series of events. */
export function metricShape(metric: any): { kind: MetricKind; events: string[]; mathProperty: string | null } | null {
  if (metric?.metric_type === 'mean' && typeof metric.source?.event === 'string') {
    const math = metric.source.math;
    return { kind: 'mean', events: [metric.source.event], mathProperty: math === 'sum' && typeof metric.source.math_property === 'string' ? metric.source.math_property : null };
  }
  if (metric?.metric_type === 'funnel' && Array.isArray(metric.series) && metric.series.length && metric.series.every((s: any) => typeof s?.event === 'string')) {
    return { kind: 'funnel', events: metric.series.map((s: any) => s.event), mathProperty: null };
  }
  return null;
}

const EXPOSURES = `exposures as (
  select d.person_id, min(e.properties->>'$feature_flag_response') as variant, min(e.timestamp) as t0
    from event e join person_distinct_id d on d.project_id = e.project_id and d.distinct_id = e.distinct_id
   where e.project_id = ? and e.event = '$feature_flag_called' and e.properties->>'$feature_flag' = ?
     and e.properties->>'$feature_flag_response' in (select jsonb_array_elements_text(?::jsonb))
     and e.timestamp >= ? and e.timestamp < ?
   group by d.person_id
  having count(distinct e.properties->>'$feature_flag_response') = 1)`;

export async function computeMetric(em: EntityManager, experiment: ExperimentForResults, metric: any, asOf: Date): Promise<ExperimentResult & { kind: MetricKind }> {
  const shape = metricShape(metric);
  if (!shape) throw new Error('Unsupported metric: mean metrics need source.event; funnel metrics need series of events.');
  const conn = em.getConnection();
  const base = [experiment.projectId, experiment.flagKey, JSON.stringify(experiment.variants), experiment.startDate, asOf];
  let rows: { variant: string; n: number; total: number; total_sq: number; steps?: number[] }[];
  if (shape.kind === 'mean') {
    const value = shape.mathProperty ? `coalesce(try_numeric(m.properties->>?), 0)` : '1';
    rows = await conn.execute<any[]>(
      `with ${EXPOSURES},
       per_person as (
         select x.person_id, x.variant, coalesce((select sum(${value}) from person_distinct_id d join event m on m.project_id = d.project_id and m.distinct_id = d.distinct_id
           where d.person_id = x.person_id and m.event = ? and m.timestamp >= x.t0 and m.timestamp < ?), 0) as v
         from exposures x)
       select variant, count(*)::int as n, sum(v)::float8 as total, sum(v * v)::float8 as total_sq from per_person group by variant`,
      [...base, ...(shape.mathProperty ? [shape.mathProperty] : []), shape.events[0], asOf],
    );
  } else {
    // s0 = exposure; s_k = first time of step k after step k-1.
    const ctes: string[] = [`s0 as (select person_id, variant, t0 as t from exposures)`];
    const params: unknown[] = [...base];
    shape.events.forEach((event, i) => {
      ctes.push(`s${i + 1} as (select s.person_id, min(s.variant) as variant, min(m.timestamp) as t from s${i} s
        join person_distinct_id d on d.person_id = s.person_id
        join event m on m.project_id = d.project_id and m.distinct_id = d.distinct_id and m.event = ? and m.timestamp >= s.t and m.timestamp < ?
        group by s.person_id)`);
      params.push(event, asOf);
    });
    const last = shape.events.length;
    const stepCounts = shape.events.map((_, i) => `(select count(*) from s${i + 1} where s${i + 1}.variant = s0v.variant)::int`).join(', ');
    rows = await conn.execute<any[]>(
      `with ${EXPOSURES}, ${ctes.join(', ')}
       select s0v.variant, count(*)::int as n, (select count(*) from s${last} where s${last}.variant = s0v.variant)::float8 as total,
              (select count(*) from s${last} where s${last}.variant = s0v.variant)::float8 as total_sq, array[${stepCounts}] as steps
         from s0 s0v group by s0v.variant`,
      params,
    );
  }
  const byKey = new Map(rows.map((r) => [r.variant, r]));
  // Missing variants count as zero; results follow the flag's variant order.
  const stats: VariantStats[] = experiment.variants.map((key) => {
    const r = byKey.get(key);
    return {
      key,
      number_of_samples: r?.n ?? 0,
      sum: r?.total ?? 0,
      sum_squares: r?.total_sq ?? 0,
      ...(shape.kind === 'funnel' ? { step_counts: r?.steps ?? shape.events.map(() => 0) } : {}),
    };
  });
  return { kind: shape.kind, ...compareVariants(stats, experiment.baselineKey, shape.kind, experiment.statsMethod) };
}
