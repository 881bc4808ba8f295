// "A guardrail check costs one day's increment, not a recompute": the event rows the check's
// statements read (EXPLAIN ANALYZE of the very statements, replayed) stay about the same whether the
// experiment has run 4 days or 16, while a full computation's grow with the days; and the counts
// it gets are the full computation's.
import type { Job } from 'bullmq';
import type { MetricStats } from '../../../shared/experiments/stats.ts';
import type { JobData } from '../../../shared/platform/jobs.ts';
import type { EntityManager } from '@mikro-orm/postgresql';
import { describe, expect, it } from 'vitest';
import { currentCounts } from '../../../shared/experiments/guardrails.ts';
import { computeExperimentCounts, experimentForResults } from '../../../shared/experiments/results.ts';
import { computeExperimentResults } from '../../../shared/experiments/results-job.ts';
import { sql } from '../../db.ts';
import { eventRowsRead, exposure, insertEvents, type Row } from '../../event-scans.ts';
import { CHECKOUT_METRICS } from '../../fixtures.ts';
import { call, createAccount, ownDatabase, apiAndWorker } from '../../helpers.ts';

// A database of its own: the plans, and so the rows read, depend on this file's events only.
const url = await ownDatabase('guardrail_cost');
const { api, worker } = await apiAndWorker({ database: url, accounts: 0 });

const DAY = 86400_000;
const now = new Date();
const today = Math.floor(now.getTime() / DAY) * DAY;
const at = (offset: number, hours: number) => new Date(today + offset * DAY + hours * 3600_000);
/** Today: within the last minute, never before midnight. */
const todayAt = (i: number) => new Date(Math.max(today + 1000 + i, now.getTime() - 60_000 + i));

/**
 * An experiment running `days` days before today: each day 12 new persons are exposed, cart and buy,
 * and buy again the next day; today too (the new ones, and yesterday's buying again).
 */
async function runningExperiment(flag: string, days: number) {
  const account = await createAccount(api.orm);
  const res = await call(api.baseUrl, 'POST', `/api/projects/${account.projectId}/experiments/`, {
    key: account.apiKey,
    body: { name: flag, feature_flag_key: flag, start_date: at(-days, 0).toISOString(), metrics: CHECKOUT_METRICS },
  });
  expect(res.status).toBe(201);
  const rows: Row[] = [];
  for (let d = 0; d <= days; d++) {
    const when = (h: number, i: number) => (d === days ? todayAt(i * 10 + h) : at(-days + d, h));
    for (let i = 0; i < 12; i++) {
      const person = `${flag}-${d}-${i}`;
      rows.push(exposure(flag, person, i % 2 ? 'test' : 'control', when(1, i)));
      rows.push({ person, distinctId: person, event: 'cart', at: when(2, i) });
      for (let later = d; later <= Math.min(d + 1, days); later++) {
        const moment = later === days ? todayAt(i * 10 + 3) : at(-days + later, 3);
        rows.push({ person, distinctId: person, event: 'purchase', at: moment, properties: { amount: 1 + (i % 5) } });
      }
    }
  }
  await insertEvents(api.orm, account.projectId, rows);
  await sql(api.orm, `analyze event, person, person_distinct_id`);
  // The daily results (yesterday's row computed after yesterday ended: the check's base).
  await computeExperimentResults(
    { data: { experimentId: res.body.id } } as Job<JobData['experimentResults']>,
    worker.deps,
  );
  const [row] = await sql(
    api.orm,
    `select x.*, f.key as flag_key, f.filters as flag_filters from experiment x join feature_flag f on f.id = x.feature_flag_id where x.id = ?`,
    [res.body.id],
  );
  return { row, experiment: experimentForResults(row), rows };
}

async function measure(flag: string, days: number) {
  const { row, experiment, rows } = await runningExperiment(flag, days);
  const asOf = new Date();
  const check = await eventRowsRead(url, (orm, events) =>
    currentCounts(orm.em.fork() as EntityManager, events, experiment, row.metrics, asOf),
  );
  const full = await eventRowsRead(url, (orm, events) =>
    computeExperimentCounts(orm.em.fork() as EntityManager, events, experiment, row.metrics, asOf),
  );
  return { check, full, events: rows.length };
}

describe('guardrail check cost', () => {
  it("reads about one day's events, however long the experiment has run; a recompute reads them all", async () => {
    const short = await measure('short', 4);
    const long = await measure('long', 16);
    for (const m of [short, long]) {
      expect(m.check.value.baseDay).toBe(new Date(today - DAY).toISOString().slice(0, 10));
      expect(m.check.value.counts).toEqual(m.full.value.map((c) => (c as MetricStats[]).at(-1)));
    }
    // A recompute grows with the days (about 17/5 of the events); the check does not.
    expect(long.full.rows / short.full.rows).toBeGreaterThan(2.5);
    expect(long.check.rows / short.check.rows).toBeLessThan(1.5);
    expect(long.check.rows * 4).toBeLessThan(long.full.rows);
    console.info('guardrail check cost (event rows read)', {
      short: { events: short.events, check: short.check.rows, recompute: short.full.rows },
      long: { events: long.events, check: long.check.rows, recompute: long.full.rows },
    });
  }, 180_000);
});
