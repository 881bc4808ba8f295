// The experiment results job with EVENT_STORE=clickhouse (chDB): ClickHouse folds each person's events
// itself (persons by its mirror of the mapping), every run from the start, and every stored day equals
// the computation from the start on PostgreSQL's copy of the same events: after an event captured
// before a run but shipped after it (so that run could not count it), and after a merge.
import type { Job } from 'bullmq';
import type { EntityManager, MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ClickHouseEventStore } from '../../../shared/events/clickhouse.ts';
import type { EventStore } from '../../../shared/events/event-store.ts';
import { shipEvents } from '../../../shared/events/shipper.ts';
import { createExperiment } from '../../../shared/experiments/service.ts';
import type { JobData } from '../../../shared/platform/jobs.ts';
import { computeExperimentResults } from '../../../shared/experiments/results-job.ts';
import type { WorkerDeps } from '../../../worker/deps.ts';
import { sql } from '../../db.ts';
import { exposure, insertEventRows, insertEvents, type Row } from '../../event-scans.ts';
import { CHECKOUT_METRICS } from '../../fixtures.ts';
import { createAccount, type TestAccount } from '../../helpers.ts';
import { clickHouseResultsWorld, storedAndFull } from '../../experiment-days.ts';

const DAY = 86400_000;
const today = Date.UTC(new Date().getUTCFullYear(), new Date().getUTCMonth(), new Date().getUTCDate());
const at = (offset: number, hours: number) => new Date(today + offset * DAY + hours * 3600_000);

let orm: MikroORM;
let ch: ClickHouseEventStore;
let pg: EventStore;
let deps: WorkerDeps;
let account: TestAccount;

beforeAll(async () => {
  ({ orm, ch, pg, deps } = await clickHouseResultsWorld('results'));
  account = await createAccount(orm);
});
afterAll(() => orm?.close());

const ship = () => shipEvents(orm, ch, { batchSize: 500, settleSeconds: 0 });
const job = (experimentId: number) => ({ data: { experimentId } }) as Job<JobData['experimentResults']>;
const purchase = (person: string, when: Date, amount: number, distinctId = person): Row => ({
  person,
  distinctId,
  event: 'purchase',
  at: when,
  properties: { amount },
});

/** Every stored day equals the computation from the start on PostgreSQL's events, as of `now`. */
async function expectSameAsPostgres(id: number, now: Date) {
  const { stored, full, days } = await storedAndFull(orm, pg, id, now);
  for (const [i, mine] of days.entries()) expect(mine).toEqual(full[i]);
  return stored;
}

describe('experiment results with the ClickHouse event store', () => {
  it('counts from ClickHouse as PostgreSQL does, every run folded from the start in the engine', async () => {
    const flag = 'ch-results';
    const id = await createExperiment(
      orm.em.fork() as EntityManager,
      { projectId: account.projectId, organizationId: account.organizationId, userId: account.userId },
      { name: flag, feature_flag_key: flag, start_date: at(-3, 9).toISOString(), metrics: CHECKOUT_METRICS },
    );
    const rows: Row[] = [];
    for (let i = 0; i < 12; i++) {
      const person = `p${i}`;
      const day = -3 + (i % 3);
      rows.push(exposure(flag, person, i % 2 ? 'test' : 'control', at(day, 10), `${person}-anon`));
      rows.push({ person, distinctId: person, event: 'cart', at: at(day, 11) });
      if (i % 3) rows.push(purchase(person, at(day, 12), 10 + i));
    }
    await insertEvents(orm, account.projectId, rows);
    await ship();
    let now = new Date();
    expect(await computeExperimentResults(job(id), deps, now)).toMatchObject({ full: 1 });
    const first = await expectSameAsPostgres(id, now);
    expect(first.length).toBeGreaterThan(0);

    // Captured now for yesterday, and not shipped yet when the days are computed again (from the
    // start: nothing stored), so they cannot count it: once it is shipped, the next run must
    // recompute, though it was captured before the stored days were computed.
    await insertEventRows(orm, account.projectId, [purchase('p0', at(-1, 15), 1000)]);
    await sql(orm, `delete from experiment_metric_result where experiment_id = ?`, [id]);
    now = new Date();
    expect(await computeExperimentResults(job(id), deps, now)).toMatchObject({ incremental: 0, full: 1 });
    await ship();
    now = new Date();
    expect(await computeExperimentResults(job(id), deps, now)).toMatchObject({ incremental: 0, full: 1 });
    await expectSameAsPostgres(id, now);
    // ClickHouse folds every run from the start itself: no per-person state is kept for a daily run.
    expect(await computeExperimentResults(job(id), deps, new Date())).toMatchObject({ incremental: 0, full: 1 });
    expect(
      await sql(orm, `select count(*)::int as n from experiment_person_state where experiment_id = ?`, [id]),
    ).toEqual([{ n: 0 }]);

    // A merge since (p1's anonymous id, with its exposure, now belongs to p2), mirrored by the shipper: the same.
    await sql(
      orm,
      `update person_distinct_id set person_id = (select person_id from person_distinct_id where project_id = ? and distinct_id = 'p2')
        where project_id = ? and distinct_id = 'p1-anon'`,
      [account.projectId, account.projectId],
    );
    await ship();
    now = new Date();
    expect(await computeExperimentResults(job(id), deps, now)).toMatchObject({ incremental: 0, full: 1 });
    await expectSameAsPostgres(id, now);
  });
});
