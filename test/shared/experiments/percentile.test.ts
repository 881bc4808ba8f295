// Percentile metrics' maths (shared/experiments/percentile.ts): the outer interval of Deng, Knoblich &
// Lu (2018) against a hand computation, its standard error against large seeded bootstraps (persons
// resampled, for events clustered in persons), the A/A false-positive rate, and bad input refused.
import { describe, expect, it } from 'vitest';
import {
  percentileComparison,
  percentileMetricProblem,
  quantileEstimate,
} from '../../../shared/experiments/percentile.ts';

/** mulberry32: a seeded uniform generator. */
function uniforms(seed: number) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const normal = (u: () => number) => Math.sqrt(-2 * Math.log(1 - u())) * Math.cos(2 * Math.PI * u());
/** Log-normal latencies (median 100 ms, heavy right tail). */
const latencies = (u: () => number, n: number, scale = 1) =>
  Array.from({ length: n }, () => scale * 100 * Math.exp(0.8 * normal(u)));
const sd = (xs: number[]) => {
  const m = xs.reduce((a, b) => a + b, 0) / xs.length;
  return Math.sqrt(xs.reduce((a, b) => a + (b - m) ** 2, 0) / (xs.length - 1));
};
const sortedQuantile = (xs: ArrayLike<number>, p: number) => {
  const s = Float64Array.from(xs).sort();
  return s[Math.max(1, Math.ceil(s.length * p - 1e-9)) - 1];
};

describe('percentile estimate', () => {
  it('is the order statistic at ⌈np⌉ with the outer interval at ranks n(p ∓ zσ) (hand computation)', () => {
    // 1..20 shuffled, P50: Q̂ = X(10) = 10; σ_p = sqrt(0.25/20) = 0.111803, z = 1.959964: ranks
    // 20 · (0.5 ∓ 0.219131) = 5.617387 and 14.382613, between neighbours 1 apart: the interval is those
    // ranks, and SE = (14.382613 − 5.617387)/(2z) = n·σ_p = sqrt(5).
    const values = [7, 3, 19, 1, 12, 20, 5, 9, 14, 2, 18, 11, 6, 16, 4, 13, 8, 17, 10, 15];
    const e = quantileEstimate(values, 0.5)!;
    expect(e.quantile).toBe(10);
    expect(e.interval[0]).toBeCloseTo(5.617387, 5);
    expect(e.interval[1]).toBeCloseTo(14.382613, 5);
    expect(e.standard_error).toBeCloseTo(Math.sqrt(5), 9);
    // P90 of 1..20: X(18); σ_p = sqrt(0.09/20) = 0.067082, ranks 20 · (0.9 ∓ 0.131478) = 15.370435 and
    // 20.63 (clamped to X(20)).
    const p90 = quantileEstimate(values, 0.9)!;
    expect(p90.quantile).toBe(18);
    expect(p90.interval[0]).toBeCloseTo(15.370435, 5);
    expect(p90.interval[1]).toBe(20);
    // One value per person: the clustered form gives the independent one (up to n/(n − 1)).
    const clustered = quantileEstimate(
      values,
      0.5,
      0.05,
      values.map((_, i) => i),
    )!;
    expect(clustered.quantile).toBe(10);
    expect(clustered.standard_error / e.standard_error).toBeCloseTo(Math.sqrt(20 / 19), 9);
  });

  it('has the standard error of a large seeded bootstrap (independent values)', () => {
    const u = uniforms(46);
    const sample = latencies(u, 4000);
    const e = quantileEstimate(sample, 0.9)!;
    const boot: number[] = [];
    for (let b = 0; b < 2000; b++) {
      const r = new Float64Array(sample.length);
      for (let i = 0; i < r.length; i++) r[i] = sample[Math.floor(u() * sample.length)];
      boot.push(sortedQuantile(r, 0.9));
    }
    expect(e.standard_error / sd(boot)).toBeGreaterThan(0.85);
    expect(e.standard_error / sd(boot)).toBeLessThan(1.2);
  });

  it('corrects for events clustered in persons: the persons bootstrap agrees, the independent formula is too narrow', () => {
    const u = uniforms(4646);
    // 1,500 persons, 1–15 events each; a person's latencies share a person effect (slow devices).
    const persons: number[][] = [];
    for (let i = 0; i < 1500; i++) {
      const effect = Math.exp(0.7 * normal(u));
      persons.push(latencies(u, 1 + Math.floor(u() * 15), effect));
    }
    const values = persons.flat();
    const clusters = persons.flatMap((events, i) => events.map(() => i));
    const e = quantileEstimate(values, 0.95, 0.05, clusters)!;
    const independent = quantileEstimate(values, 0.95)!;
    const boot: number[] = [];
    for (let b = 0; b < 1000; b++) {
      const r: number[] = [];
      for (let i = 0; i < persons.length; i++) r.push(...persons[Math.floor(u() * persons.length)]);
      boot.push(sortedQuantile(r, 0.95));
    }
    const bootSd = sd(boot);
    expect(e.standard_error / bootSd).toBeGreaterThan(0.8);
    expect(e.standard_error / bootSd).toBeLessThan(1.25);
    expect(independent.standard_error).toBeLessThan(0.75 * bootSd);
  });
});

describe('percentileComparison (the simulation hook)', () => {
  it('compares each variant with control: absolute and relative differences, p-value and intervals', () => {
    const u = uniforms(7);
    const control = latencies(u, 3000);
    const slower = latencies(u, 3000, 1.3);
    const r = percentileComparison(
      [
        { key: 'control', values: control },
        { key: 'test', values: slower },
      ],
      { percentile: 0.9, baselineKey: 'control' },
    );
    const v = r.variant_results[0] as Record<string, any>;
    const qc = sortedQuantile(control, 0.9);
    const qt = sortedQuantile(slower, 0.9);
    expect(r).toMatchObject({ kind: 'percentile', percentile: 0.9, unit: 'per_person' });
    expect(r.baseline).toMatchObject({ key: 'control', quantile: qc, number_of_samples: 3000 });
    expect(v).toMatchObject({ key: 'test', quantile: qt, method: 'frequentist', significant: true });
    expect(v.difference.absolute).toBeCloseTo(qt - qc, 9);
    expect(v.difference.relative).toBeCloseTo(qt / qc - 1, 9);
    // The true relative change is +30%: inside the interval; p-value small.
    expect(v.confidence_interval[0]).toBeLessThan(0.3);
    expect(v.confidence_interval[1]).toBeGreaterThan(0.3);
    expect(v.p_value).toBeLessThan(0.001);
    const se = Math.hypot(r.baseline.quantile_standard_error as number, v.quantile_standard_error);
    expect(v.difference.absolute_interval[1] - v.difference.absolute_interval[0]).toBeCloseTo(2 * 1.959963985 * se, 6);
    // Bayesian: the same normal approximation, said so.
    const b = percentileComparison(
      [
        { key: 'control', values: control },
        { key: 'test', values: slower },
      ],
      { percentile: 0.9, baselineKey: 'control', method: 'bayesian' },
    );
    const bv = b.variant_results[0] as Record<string, any>;
    expect(bv.credible_interval).toEqual(v.confidence_interval);
    expect(bv.chance_to_win).toBeGreaterThan(0.999);
    expect(b.approximation).toMatch(/flat prior/);
    // Too few exposures: no verdict.
    const few = percentileComparison(
      [
        { key: 'control', values: control.slice(0, 20) },
        { key: 'test', values: slower.slice(0, 20) },
      ],
      { percentile: 0.9, baselineKey: 'control' },
    );
    expect(few.variant_results[0]).toMatchObject({ p_value: null, confidence_interval: null, significant: null });
    expect(few.baseline.validation_failures).toContain('NOT_ENOUGH_EXPOSURES');
    expect(() => percentileComparison([], { percentile: 0.995, baselineKey: 'control' })).toThrow(RangeError);
    expect(percentileComparison([], { percentile: 0.9, baselineKey: 'control' })).toMatchObject({
      baseline: { key: 'control', number_of_samples: 0, validation_failures: ['NOT_ENOUGH_EXPOSURES', 'NO_VALUES'] },
      variant_results: [],
    });
  });

  it('A/A: about 5% of 1,000 seeded experiments are significant at α = 0.05 (P50, P90, P95)', () => {
    for (const p of [0.5, 0.9, 0.95]) {
      const u = uniforms(1000 + p * 100);
      let significant = 0;
      const runs = 1000;
      for (let r = 0; r < runs; r++) {
        const result = percentileComparison(
          [
            { key: 'control', values: latencies(u, 2000) },
            { key: 'test', values: latencies(u, 2000) },
          ],
          { percentile: p, baselineKey: 'control' },
        );
        if (result.variant_results[0].significant === true) significant++;
      }
      expect(significant / runs, `P${p * 100}`).toBeGreaterThanOrEqual(0.03);
      expect(significant / runs, `P${p * 100}`).toBeLessThanOrEqual(0.07);
    }
  });
});

describe('percentile metric validation', () => {
  const metric = (over: Record<string, unknown>) => ({
    kind: 'ExperimentMetric',
    metric_type: 'percentile',
    percentile: 0.9,
    percentile_unit: 'per_event',
    source: { kind: 'EventsNode', event: 'api_call', math: 'sum', math_property: '$latency' },
    ...over,
  });
  it('accepts P50–P99 per person or per event, and says what is wrong otherwise', () => {
    expect(percentileMetricProblem(metric({}))).toBeNull();
    expect(percentileMetricProblem(metric({ percentile: 0.5, percentile_unit: 'per_person' }))).toBeNull();
    expect(percentileMetricProblem({ metric_type: 'mean' })).toBeNull();
    for (const bad of [0.49, 0.995, 1, 90, '0.9', null])
      expect(percentileMetricProblem(metric({ percentile: bad }))).toMatch(/0\.5 to 0\.99/);
    expect(percentileMetricProblem(metric({ percentile_unit: 'per_day' }))).toMatch(/per_person, per_event/);
    expect(percentileMetricProblem(metric({ source: { event: 'api_call' } }))).toMatch(/math_property/);
    expect(percentileMetricProblem(metric({ source: null }))).toMatch(/source/);
    expect(percentileMetricProblem(metric({ source: { event: 'x', math: 'avg', math_property: 'v' } }))).toMatch(
      /sum or total/,
    );
    // Per person, math total: the count of events.
    expect(
      percentileMetricProblem(metric({ percentile_unit: 'per_person', source: { event: 'x', math: 'total' } })),
    ).toBeNull();
  });
});
