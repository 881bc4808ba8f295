// The daily results run is incremental: it starts from the stored counts of the last complete day and
// each exposed person's stored state as of that day's end (experiment_person_state), and adds the
// events since, so the event rows its statements read (EXPLAIN ANALYZE of the very statements,
// replayed) are about those events, however long the experiment has run, while a full recompute's
// grow with the days. Its results are a full recompute's, also after a person exposed earlier comes
// back, on the next day from the state the run itself advanced, after a late event for an earlier
// day, after a deletion and after persons merged with no new event (those three make the run
// recompute in full, and say why).
import type { EntityManager, MikroORM } from '@mikro-orm/postgresql';
import type { Job } from 'bullmq';
import { describe, expect, it } from 'vitest';
import {
  computeCountsSince,
  computeExperimentCounts,
  computeExperimentSeries,
  experimentForResults,
} from '../../../shared/experiments/results.ts';
import { computeExperimentResults } from '../../../shared/experiments/results-job.ts';
import { sql } from '../../db.ts';
import { eventRowsRead, exposure, insertEventRows, insertEvents, type Row } from '../../event-scans.ts';
import { CHECKOUT_METRICS } from '../../fixtures.ts';
import { call, createAccount, ownDatabase, apiAndWorker } from '../../helpers.ts';

// A database of its own: the plans, and so the rows read, depend on this file's events only.
const url = await ownDatabase('results_incremental');
const { api, worker } = await apiAndWorker({ database: url, accounts: 0 });

const DAY = 86400_000;
const today = Math.floor(Date.now() / DAY) * DAY;
const at = (offset: number, hours: number) => new Date(today + offset * DAY + hours * 3600_000);
/** Today: within the last minute, never before midnight. */
const todayAt = (i: number) => new Date(Math.max(today + 1000 + i, Date.now() - 60_000 + i));
const job = (experimentId: number) => ({ data: { experimentId } }) as Job<{ experimentId?: number }>;
type Experiment = Awaited<ReturnType<typeof experimentOf>>;

async function experimentOf(id: number) {
  const [row] = await sql(
    api.orm,
    `select x.*, f.key as flag_key, f.filters as flag_filters from experiment x join feature_flag f on f.id = x.feature_flag_id where x.id = ?`,
    [id],
  );
  return { row, experiment: experimentForResults(row) };
}

/**
 * An experiment that ran `days` days before today: each day 12 new persons are exposed, cart and buy,
 * and buy again the next day. Its results are computed (the backfill); then today's events arrive:
 * 12 new persons, yesterday's buying again, and two persons of the first day exposed again and buying.
 */
async function runningExperiment(flag: string, days: number, options: { backfillAt?: Date; cuped?: boolean } = {}) {
  const { backfillAt, cuped } = options;
  const account = await createAccount(api.orm);
  const res = await call(api.baseUrl, 'POST', `/api/projects/${account.projectId}/experiments/`, {
    key: account.apiKey,
    body: {
      name: flag,
      feature_flag_key: flag,
      start_date: at(-days, 0).toISOString(),
      metrics: CHECKOUT_METRICS,
      ...(cuped ? { stats_config: { method: 'frequentist', cuped: { enabled: true, lookback_days: 3 } } } : {}),
    },
  });
  expect(res.status).toBe(201);
  const person = (d: number, i: number) => `${flag}-${d}-${i}`;
  const variant = (i: number) => (i % 2 ? 'test' : 'control');
  const past: Row[] = [];
  for (let d = 0; d < days; d++) {
    for (let i = 0; i < 12; i++) {
      const p = person(d, i);
      // With CUPED, every third person bought before their exposure too (their covariate).
      if (cuped && i % 3 === 0)
        past.push({ person: p, distinctId: p, event: 'purchase', at: at(-days + d, 0.5), properties: { amount: 7 } });
      past.push(exposure(flag, p, variant(i), at(-days + d, 1)));
      past.push({ person: p, distinctId: p, event: 'cart', at: at(-days + d, 2) });
      for (let later = d; later <= Math.min(d + 1, days - 1); later++) {
        past.push({
          person: p,
          distinctId: p,
          event: 'purchase',
          at: at(-days + later, 3),
          properties: { amount: 1 + (i % 5) },
        });
      }
    }
  }
  await insertEvents(api.orm, account.projectId, past);
  await sql(api.orm, `analyze event, person, person_distinct_id`);
  const backfill = await computeExperimentResults(job(res.body.id), worker.deps, backfillAt);
  expect(backfill.full).toBe(1);
  // A backfill as of an earlier time (`backfillAt`, yesterday): its days before that one are done,
  // and the events were all there when they were computed (none is late).
  if (backfillAt)
    await sql(api.orm, `update experiment_metric_result set computed_at = now() where experiment_id = ? and day < ?`, [
      res.body.id,
      new Date(Math.floor(backfillAt.getTime() / DAY) * DAY).toISOString().slice(0, 10),
    ]);

  // Today's events, after the backfill.
  const fresh: Row[] = [];
  for (let i = 0; i < 12; i++) {
    const p = person(days, i);
    if (cuped && i % 3 === 0)
      fresh.push({ person: p, distinctId: p, event: 'purchase', at: todayAt(i * 10), properties: { amount: 7 } });
    fresh.push(exposure(flag, p, variant(i), todayAt(i * 10 + 1)));
    fresh.push({ person: p, distinctId: p, event: 'cart', at: todayAt(i * 10 + 2) });
    fresh.push({ person: p, distinctId: p, event: 'purchase', at: todayAt(i * 10 + 3), properties: { amount: 2 } });
    const y = person(days - 1, i);
    fresh.push({ person: y, distinctId: y, event: 'purchase', at: todayAt(i * 10 + 4), properties: { amount: 3 } });
  }
  const newPersons = fresh.filter((r) => r.person.startsWith(`${flag}-${days}-`));
  await insertEvents(api.orm, account.projectId, newPersons);
  // Yesterday's and the first day's persons exist already: their events only.
  const returning: Row[] = [];
  for (const i of [0, 1]) {
    const p = person(0, i);
    returning.push(exposure(flag, p, variant(i), todayAt(200 + i)));
    returning.push({ person: p, distinctId: p, event: 'purchase', at: todayAt(210 + i), properties: { amount: 4 } });
  }
  await insertEventRows(api.orm, account.projectId, [...fresh.filter((r) => !newPersons.includes(r)), ...returning]);
  return {
    id: res.body.id as number,
    projectId: account.projectId,
    events: past.length + fresh.length + returning.length,
    today: fresh.length + returning.length,
  };
}

/** Every stored day equals a full recompute as of `now` (the results as stored: through JSON). */
/** The experiment's metrics computed from the start, as of `now` (the run's own millisecond included). */
async function fullSeries(id: number, now: Date) {
  const { row, experiment } = await experimentOf(id);
  const full = await computeExperimentSeries(
    api.orm.em.fork() as EntityManager,
    worker.deps.events,
    experiment,
    row.metrics,
    new Date(now.getTime() + 1),
  );
  return { row, experiment, full };
}

async function expectFullRecompute(id: number, now: Date) {
  const { row, experiment, full } = await fullSeries(id, now);
  const stored = await sql(
    api.orm,
    `select metric_uuid, day::text as day, status, result from experiment_metric_result where experiment_id = ? order by day`,
    [id],
  );
  const firstDay = Math.floor(experiment.startDate.getTime() / DAY) * DAY;
  expect(stored.length).toBe(row.metrics.length * Math.round((today - firstDay) / DAY + 1));
  for (const [i, metric] of row.metrics.entries()) {
    const series = full[i];
    if (series instanceof Error) throw series;
    const mine = stored.filter((r) => r.metric_uuid === metric.uuid);
    expect(mine.map((r) => r.status)).toEqual(mine.map(() => 'completed'));
    expect(mine.map((r) => r.result)).toEqual(JSON.parse(JSON.stringify(series)));
  }
}

async function dailyRun(id: number, now: Date) {
  return eventRowsRead(url, (orm: MikroORM, events) =>
    computeExperimentResults(job(id), { ...worker.deps, orm, events }, now),
  );
}

async function fullRecomputeRows(id: number, now: Date) {
  const { row, experiment }: Experiment = await experimentOf(id);
  return eventRowsRead(url, (orm: MikroORM, events) =>
    computeExperimentSeries(
      orm.em.fork() as EntityManager,
      events,
      experiment,
      row.metrics,
      new Date(now.getTime() + 1),
    ),
  );
}

/** A deterministic pseudo-random sequence in [0, 1) (mulberry32). */
function random(seed: number) {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

describe('incremental daily results', () => {
  it("reads about one day's events, however long the experiment has run, and equals a full recompute", async () => {
    const measured = [];
    for (const days of [4, 16]) {
      const { id, events, today: todays } = await runningExperiment(`inc${days}`, days);
      await sql(api.orm, `analyze event, person, person_distinct_id`);
      const now = new Date();
      const daily = await dailyRun(id, now);
      expect(daily.value).toMatchObject({ experiments: 1, incremental: 1, full: 0 });
      await expectFullRecompute(id, now);
      const full = await fullRecomputeRows(id, now);
      measured.push({ days, events, todays, daily: daily.rows, full: full.rows });
    }
    const [short, long] = measured;
    console.info('daily run cost (event rows read)', measured);
    // A recompute grows with the days (about 17/5 of the events); the daily run does not.
    expect(long.full / short.full).toBeGreaterThan(2.5);
    expect(long.daily / short.daily).toBeLessThan(1.5);
    expect(long.daily * 2.5).toBeLessThan(long.full);
    // About today's events: the events since yesterday's end (read once), and the look-up for late
    // events (the rows inserted since the stored day was computed: today's again). No history.
    for (const m of measured) expect(m.daily).toBeLessThanOrEqual(2.5 * m.todays);
  }, 180_000);

  it('advances the per-person state day by day, and recomputes in full after persons merged with no new event', async () => {
    // Stored as of yesterday noon: the next run continues the day before yesterday and stores the
    // state as of yesterday's end, which the run after it continues.
    const { id, projectId } = await runningExperiment('state', 5, { backfillAt: at(-1, 12) });
    let now = new Date();
    expect(await computeExperimentResults(job(id), worker.deps, now)).toMatchObject({ incremental: 1, full: 0 });
    await expectFullRecompute(id, now);
    now = new Date();
    const next = await dailyRun(id, now);
    expect(next.value).toMatchObject({ incremental: 1, full: 0 });
    await expectFullRecompute(id, now);

    // Merges, and no event since: a person of the first day (control) takes over one of day 2 (test:
    // now exposed to both variants, so they leave from day 2) and one of day 1 (control: their
    // purchases count for the first person from then on).
    const personOf = async (distinctId: string) =>
      (
        await sql(api.orm, `select person_id from person_distinct_id where project_id = ? and distinct_id = ?`, [
          projectId,
          distinctId,
        ])
      )[0].person_id as string;
    const target = await personOf('state-0-0');
    // A distinct id with no earlier events linked to a person (an $identify of a new id): nothing to redo.
    await sql(api.orm, `insert into person_distinct_id (project_id, person_id, distinct_id) values (?, ?, 'alias')`, [
      projectId,
      target,
    ]);
    now = new Date();
    expect(await computeExperimentResults(job(id), worker.deps, now)).toMatchObject({ incremental: 1, full: 0 });
    for (const other of ['state-2-1', 'state-1-2']) {
      const merged = await personOf(other);
      await sql(api.orm, `update person_distinct_id set person_id = ? where person_id = ?`, [target, merged]);
      await sql(api.orm, `delete from person where id = ?`, [merged]);
    }
    now = new Date();
    expect(await computeExperimentResults(job(id), worker.deps, now)).toMatchObject({ incremental: 0, full: 1 });
    await expectFullRecompute(id, now);
    // Then incremental again, from the state the recompute rebuilt.
    now = new Date();
    expect(await computeExperimentResults(job(id), worker.deps, now)).toMatchObject({ incremental: 1, full: 0 });
    await expectFullRecompute(id, now);
  }, 180_000);

  it('equals a full recompute after every run, day after day, on random persons (CUPED, funnels with a repeated step, persons leaving)', async () => {
    const flag = 'random';
    const account = await createAccount(api.orm);
    const metrics = [
      ...CHECKOUT_METRICS,
      { kind: 'ExperimentMetric', metric_type: 'mean', source: { kind: 'EventsNode', event: 'cart' } },
      {
        kind: 'ExperimentMetric',
        metric_type: 'funnel',
        series: ['cart', 'cart', 'purchase'].map((event) => ({ kind: 'EventsNode', event })),
      },
    ];
    const res = await call(api.baseUrl, 'POST', `/api/projects/${account.projectId}/experiments/`, {
      key: account.apiKey,
      body: {
        name: flag,
        feature_flag_key: flag,
        start_date: at(-6, 0).toISOString(),
        metrics,
        stats_config: { method: 'frequentist', cuped: { enabled: true, lookback_days: 2 } },
      },
    });
    expect(res.status).toBe(201);
    const id = res.body.id as number;
    const rand = random(33);
    const end = Date.now() - 60_000;
    const moment = (from: number) => new Date(from + rand() * (end - from));
    const rows: Row[] = [];
    for (let i = 0; i < 80; i++) {
      const person = `${flag}-${i}`;
      // Some persons have a second distinct id; their events go under either.
      const ids = rand() < 0.2 ? [person, `${person}-b`] : [person];
      const distinctId = () => ids[Math.floor(rand() * ids.length)];
      const variant = rand() < 0.5 ? 'control' : 'test';
      if (rand() < 0.9) {
        const exposed = moment(at(-6, 0).getTime());
        rows.push(exposure(flag, person, variant, exposed, distinctId()));
        if (rand() < 0.3) rows.push(exposure(flag, person, variant, moment(exposed.getTime()), distinctId()));
        if (rand() < 0.15) {
          const other = variant === 'control' ? 'test' : 'control';
          rows.push(exposure(flag, person, other, moment(exposed.getTime()), distinctId()));
        }
      }
      const events = Math.floor(rand() * 8);
      for (let k = 0; k < events; k++) {
        const event = rand() < 0.5 ? 'cart' : 'purchase';
        rows.push({
          person,
          distinctId: distinctId(),
          event,
          at: moment(at(-8, 0).getTime()),
          properties: event === 'purchase' ? { amount: 1 + Math.floor(rand() * 5) } : {},
        });
      }
    }
    await insertEvents(api.orm, account.projectId, rows);
    await sql(api.orm, `analyze event, person, person_distinct_id`);

    /** As a run a day apart would find them: the days before `asOf`'s were computed after every event arrived. */
    const settle = (asOf: Date) =>
      sql(api.orm, `update experiment_metric_result set computed_at = now() where experiment_id = ? and day < ?`, [
        id,
        new Date(Math.floor(asOf.getTime() / DAY) * DAY).toISOString().slice(0, 10),
      ]);
    const backfillAt = at(-4, 12);
    expect(await computeExperimentResults(job(id), worker.deps, backfillAt)).toMatchObject({ full: 1 });
    await settle(backfillAt);
    for (const asOf of [at(-3, 6), at(-2, 18), at(-1, 12), new Date()]) {
      expect(await computeExperimentResults(job(id), worker.deps, asOf)).toMatchObject({ incremental: 1, full: 0 });
      const { row, full } = await fullSeries(id, asOf);
      const stored = await sql(
        api.orm,
        `select metric_uuid, result from experiment_metric_result where experiment_id = ? and status = 'completed' order by day`,
        [id],
      );
      for (const [i, metric] of row.metrics.entries()) {
        expect(stored.filter((r) => r.metric_uuid === metric.uuid).map((r) => r.result)).toEqual(
          JSON.parse(JSON.stringify(full[i])),
        );
      }
      await settle(asOf);
    }
  }, 180_000);

  it("with CUPED: a person exposed since brings their lookback days' value, and the covariates equal a full recompute", async () => {
    const { id } = await runningExperiment('cuped', 5, { backfillAt: at(-1, 12), cuped: true });
    for (let run = 0; run < 2; run++) {
      const now = new Date();
      expect(await computeExperimentResults(job(id), worker.deps, now)).toMatchObject({ incremental: 1, full: 0 });
      await expectFullRecompute(id, now);
    }
    const [stored] = await sql(
      api.orm,
      `select result from experiment_metric_result where experiment_id = ? order by day desc limit 1`,
      [id],
    );
    expect(stored.result.baseline.covariate_sum).toBeGreaterThan(0);
  }, 180_000);

  it('recomputes in full after a late event for an earlier day or a deletion, and stays exact', async () => {
    const { id, projectId } = await runningExperiment('late', 5);
    let now = new Date();
    expect((await computeExperimentResults(job(id), worker.deps, now)).incremental).toBe(1);
    await expectFullRecompute(id, now);

    // The guardrail check's way (continues the stored day and its state, stores nothing): the same counts.
    const { row, experiment } = await experimentOf(id);
    const until = new Date(now.getTime() + 1);
    const em = api.orm.em.fork() as EntityManager;
    const since = await computeCountsSince(em, worker.deps.events, experiment, row.metrics, until, 5, {
      lateEvents: false,
    });
    expect(since.recomputed).toBeNull();
    const full = await computeExperimentCounts(em, worker.deps.events, experiment, row.metrics, until);
    expect(since.series.map((s) => (s as unknown[]).at(-1))).toEqual(full.map((s) => (s as unknown[]).at(-1)));

    // A purchase three days ago, arriving now: the stored days since then were missing it.
    await insertEventRows(api.orm, projectId, [
      { person: 'late-1-3', distinctId: 'late-1-3', event: 'purchase', at: at(-3, 5), properties: { amount: 5 } },
    ]);
    now = new Date();
    const late = await computeExperimentResults(job(id), worker.deps, now);
    expect(late).toMatchObject({ incremental: 0, full: 1 });
    await expectFullRecompute(id, now);

    // Then an incremental run again (nothing new: the same results).
    now = new Date();
    expect(await computeExperimentResults(job(id), worker.deps, now)).toMatchObject({ incremental: 1, full: 0 });
    await expectFullRecompute(id, now);

    // A person deleted (their events gone, the deletion finished after the stored days were computed).
    await sql(api.orm, `delete from event where project_id = ? and distinct_id = 'late-0-4'`, [projectId]);
    await sql(
      api.orm,
      `insert into async_deletion (project_id, deletion_type, key, mode, status, started_at, finished_at)
       values (?, 'person', 'late-0-4', 'events', 'completed', now(), now())`,
      [projectId],
    );
    now = new Date();
    expect(await computeExperimentResults(job(id), worker.deps, now)).toMatchObject({ incremental: 0, full: 1 });
    await expectFullRecompute(id, now);
  }, 180_000);
});
