import { createHash } from 'node:crypto';
import { canonicalJson } from '../platform/canonical-json.ts';

/**
 * PostHog's metric fingerprint: it changes whenever what the metric measures, the experiment's
 * start date, the stats method or the exposure criteria change, so stale results are not reused.
 * `analysis` (our addition: the multiple-comparison correction in force) counts only when set, so
 * experiments without one keep PostHog's fingerprint.
 */
export function metricFingerprint(
  metric: Record<string, unknown>,
  startDate: string | null,
  statsMethod: string,
  exposureCriteria: unknown,
  analysis: Record<string, unknown> | null = null,
): string {
  const { uuid: _u, name: _n, kind: _k, fingerprint: _f, ...rest } = metric;
  const payload: Record<string, unknown> = { metric: rest, start_date: startDate, stats_method: statsMethod };
  if (analysis) payload.analysis = analysis;
  if (exposureCriteria && (typeof exposureCriteria !== 'object' || Object.keys(exposureCriteria).length))
    payload.exposure_criteria = exposureCriteria;
  return createHash('sha256').update(canonicalJson(payload)).digest('hex');
}
