// The experiment results backfill reads each event about once, whatever the number of days: the rows
// its statements scan from the event table (counted by EXPLAIN ANALYZE of the very statements the
// job ran, replayed on the same data) grow linearly with the days, not with days². And its daily
// cumulative results equal a hand-written as-of computation for every day, on data with the hard cases.
import type { Job } from 'bullmq';
import type { JobData } from '../../../shared/platform/jobs.ts';
import { describe, expect, it } from 'vitest';
import { computeExperimentResults } from '../../../shared/experiments/results-job.ts';
import { sql } from '../../db.ts';
import { eventRowsRead, exposure, insertEvents as insertEventRows, type Row } from '../../event-scans.ts';
import { CHECKOUT_METRICS } from '../../fixtures.ts';
import { call, createAccount, ownDatabase, apiAndWorker } from '../../helpers.ts';
import type { TestAccount } from '../../helpers.ts';

// A database of its own: the plans, and so the rows scanned, then depend on this file's events only,
// not on what other files have put in the shared event table when `analyze event` runs.
const url = await ownDatabase('results_scan');
const { api, worker } = await apiAndWorker({ database: url, accounts: 0 });

const DAY = 86400_000;
const today = Date.UTC(new Date().getUTCFullYear(), new Date().getUTCMonth(), new Date().getUTCDate());
const dayStart = (offset: number) => new Date(today + offset * DAY);
const at = (offset: number, hours: number) => new Date(dayStart(offset).getTime() + hours * 3600_000);

async function createExperiment(account: TestAccount, flagKey: string, start: Date) {
  const res = await call(api.baseUrl, 'POST', `/api/projects/${account.projectId}/experiments/`, {
    key: account.apiKey,
    body: { name: flagKey, feature_flag_key: flagKey, start_date: start.toISOString(), metrics: CHECKOUT_METRICS },
  });
  expect(res.status).toBe(201);
  return res.body;
}

/** Runs the results job for `experimentId` as of `now`, and counts the event rows its statements read. */
async function backfillScans(experimentId: number, now: Date): Promise<{ rows: number; results: number }> {
  await sql(api.orm, `delete from experiment_metric_result where experiment_id = ?`, [experimentId]);
  const { rows, value } = await eventRowsRead(url, (orm, events) =>
    computeExperimentResults(
      { data: { experimentId } } as Job<JobData['experimentResults']>,
      { ...worker.deps, orm, events },
      now,
    ),
  );
  return { rows, results: value.results };
}

const insertEvents = (projectId: number, rows: Row[]) => insertEventRows(api.orm, projectId, rows);

describe('experiment results backfill cost', () => {
  it('reads each event about once: event rows scanned grow linearly with the days backfilled', async () => {
    const account = await createAccount(api.orm);
    const DAYS = 10;
    const start = dayStart(-DAYS);
    const exp = await createExperiment(account, 'linear', start);
    // Every day 12 new persons are exposed; each carts and buys on that day and buys again the next day.
    const rows: Row[] = [];
    for (let d = 0; d < DAYS; d++) {
      for (let i = 0; i < 12; i++) {
        const person = `p${d}-${i}`;
        rows.push(exposure('linear', person, i % 2 ? 'test' : 'control', at(-DAYS + d, 1)));
        rows.push({ person, distinctId: person, event: 'cart', at: at(-DAYS + d, 2) });
        for (let later = d; later < Math.min(d + 2, DAYS); later++) {
          const amount = 1 + (i % 5);
          const when = at(-DAYS + later, 3);
          rows.push({ person, distinctId: person, event: 'purchase', at: when, properties: { amount } });
        }
      }
    }
    await insertEvents(account.projectId, rows);
    await sql(api.orm, `analyze event`);

    const half = await backfillScans(exp.id, at(-DAYS / 2, -1)); // days 0..4
    const full = await backfillScans(exp.id, at(0, -1)); // days 0..9
    expect(half.results).toBe(2 * (DAYS / 2));
    expect(full.results).toBe(2 * DAYS);
    const halfEvents = rows.filter((r) => r.at < at(-DAYS / 2, -1)).length;
    const fullEvents = rows.filter((r) => r.at < at(0, -1)).length;
    expect(fullEvents / halfEvents).toBeCloseTo(2, 0); // the data grows linearly with the days
    // Linear: twice the days, about twice the rows (quadratic: about 3.6×); each of the two metrics
    // reads each event of the range at most about once.
    expect(full.rows / half.rows).toBeLessThan(2.5);
    expect(half.rows).toBeLessThanOrEqual(2.2 * halfEvents);
    expect(full.rows).toBeLessThanOrEqual(2.2 * fullEvents);
  });

  it('gives every day the same cumulative result as an as-of computation from scratch, on the hard cases', async () => {
    const account = await createAccount(api.orm);
    const DAYS = 6;
    const start = at(-DAYS, 5); // mid-day start: exposures earlier that day do not count
    const exp = await createExperiment(account, 'same', start);
    let seed = 7;
    const random = () => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed / 2 ** 31;
    };
    const amounts = [3, 12.5, ' 7 ', '1e2', 'abc', '-2.25', null, true, 'NaN', 0.1];
    const rows: Row[] = [];
    for (let i = 0; i < 160; i++) {
      const person = `q${i}`;
      const ids = i % 7 === 0 ? [`${person}-a`, `${person}-b`] : [person]; // some persons use two distinct ids
      const id = () => ids[Math.floor(random() * ids.length)];
      const variant = random() < 0.5 ? 'control' : 'test';
      const first = Math.floor(random() * DAYS);
      const when = (day: number) => at(-DAYS + day, 24 * random());
      rows.push(exposure('same', person, variant, when(first), id()));
      const again = first + Math.floor(random() * (DAYS - first));
      if (random() < 0.3) rows.push(exposure('same', person, variant, when(again), id()));
      // Some switch variant later (they count until then), some are exposed before the start, some
      // get a variant the flag does not have, some another flag's exposure.
      const other = variant === 'control' ? 'test' : 'control';
      if (i % 11 === 0) rows.push(exposure('same', person, other, when(Math.min(DAYS - 1, first + 2)), id()));
      if (i % 13 === 0) rows.push(exposure('same', person, variant, at(-DAYS, 1), id()));
      if (i % 17 === 0) rows.push(exposure('same', person, 'other', when(first), id()));
      if (i % 19 === 0) rows.push(exposure('elsewhere', person, 'test', when(0), id()));
      for (let k = Math.floor(random() * 6); k > 0; k--) {
        const amount = amounts[Math.floor(random() * amounts.length)];
        const event = random() < 0.6 ? 'purchase' : 'cart';
        const properties = amount === null ? {} : { amount };
        rows.push({ person, distinctId: id(), event, at: when(Math.floor(random() * DAYS)), properties });
      }
    }
    // Two variants at the same instant: counted nowhere, ever.
    const tie = at(-DAYS + 1, 8);
    rows.push(exposure('same', 'tie', 'control', tie), exposure('same', 'tie', 'test', tie));
    rows.push({ person: 'tie', distinctId: 'tie', event: 'purchase', at: at(-DAYS + 1, 9), properties: { amount: 5 } });
    // Exposure, cart and purchase at one instant: each step counts (at or after the step before).
    const instant = at(-DAYS + 2, 10);
    rows.push(exposure('same', 'instant', 'test', instant));
    rows.push({ person: 'instant', distinctId: 'instant', event: 'cart', at: instant });
    rows.push({ person: 'instant', distinctId: 'instant', event: 'purchase', at: instant, properties: { amount: 4 } });
    await insertEvents(account.projectId, rows);

    const now = at(0, -1);
    await computeExperimentResults(
      { data: { experimentId: exp.id } } as Job<JobData['experimentResults']>,
      worker.deps,
      now,
    );
    const stored = await sql(
      api.orm,
      `select metric_uuid, day::text as day, status, result from experiment_metric_result
        where experiment_id = ? order by day`,
      [exp.id],
    );
    expect(stored).toHaveLength(2 * DAYS);

    // The reference: each day from scratch, straight from the rows, as the as-of query defines it.
    const numeric = /^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d{1,4})?\s*$/;
    const numberOf = (v: unknown) =>
      typeof v === 'number' ? v : typeof v === 'string' && numeric.test(v) ? Number(v) : 0;
    const byPerson = Map.groupBy(rows, (r) => r.person);
    const asOf = (day: number) => (day === DAYS - 1 ? new Date(now.getTime() + 1) : dayStart(-DAYS + day + 1));
    for (let day = 0; day < DAYS; day++) {
      const until = asOf(day);
      const mean = new Map<string, { n: number; sum: number; sq: number }>();
      const funnel = new Map<string, { n: number; steps: number[] }>();
      for (const [, own] of byPerson) {
        const exposures = own.filter(
          (r) =>
            r.event === '$feature_flag_called' &&
            r.properties!.$feature_flag === 'same' &&
            ['control', 'test'].includes(r.properties!.$feature_flag_response as string) &&
            r.at >= start &&
            r.at < until,
        );
        const variants = new Set(exposures.map((r) => r.properties!.$feature_flag_response as string));
        if (variants.size !== 1) continue;
        const [variant] = variants;
        const t0 = Math.min(...exposures.map((r) => r.at.getTime()));
        const after = own.filter((r) => r.at.getTime() >= t0 && r.at < until);
        const v = after.filter((r) => r.event === 'purchase').reduce((s, r) => s + numberOf(r.properties?.amount), 0);
        const m = mean.get(variant) ?? mean.set(variant, { n: 0, sum: 0, sq: 0 }).get(variant)!;
        m.n++;
        m.sum += v;
        m.sq += v * v;
        const f = funnel.get(variant) ?? funnel.set(variant, { n: 0, steps: [0, 0] }).get(variant)!;
        f.n++;
        let t = t0;
        for (const [k, step] of ['cart', 'purchase'].entries()) {
          const hits = after.filter((r) => r.event === step && r.at.getTime() >= t).map((r) => r.at.getTime());
          if (!hits.length) break;
          t = Math.min(...hits);
          f.steps[k]++;
        }
      }
      const dayText = dayStart(-DAYS + day)
        .toISOString()
        .slice(0, 10);
      const [meanRow, funnelRow] = exp.metrics.map((metric: { uuid: string }) =>
        stored.find((r) => r.metric_uuid === metric.uuid && r.day === dayText),
      );
      expect(meanRow.status).toBe('completed');
      for (const v of [meanRow.result.baseline, ...meanRow.result.variant_results]) {
        const want = mean.get(v.key) ?? { n: 0, sum: 0, sq: 0 };
        expect({ day, key: v.key, n: v.number_of_samples }).toEqual({ day, key: v.key, n: want.n });
        expect(v.sum).toBeCloseTo(want.sum, 9);
        expect(v.sum_squares).toBeCloseTo(want.sq, 9);
      }
      for (const v of [funnelRow.result.baseline, ...funnelRow.result.variant_results]) {
        const want = funnel.get(v.key) ?? { n: 0, steps: [0, 0] };
        const got = { day, key: v.key, n: v.number_of_samples, steps: v.step_counts, sum: v.sum };
        expect(got).toEqual({ day, key: v.key, n: want.n, steps: want.steps, sum: want.steps[1] });
      }
    }
    // Enough exposures by the last day for statistics, so those were compared too.
    const last = stored.filter((r) => r.day === dayStart(-1).toISOString().slice(0, 10));
    const withStatistics = last.filter(
      (r) => r.result.baseline.number_of_samples >= 50 && r.result.variant_results[0].chance_to_win !== null,
    );
    expect(withStatistics).toHaveLength(2);
  });
});
