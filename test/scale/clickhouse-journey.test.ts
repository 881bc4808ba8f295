// The two processes together, as a user runs them: a real API process and a real worker process on a
// database of their own, once with EVENT_STORE=postgres and once with EVENT_STORE=clickhouse over HTTP
// (the test-only front of test/clickhouse-server.ts, owning a chDB directory). The same journey on each:
// capture → (ClickHouse: the worker ships, then PostgreSQL's buffer keeps only the last hour) → the
// persons funnel, drop-off, correlation, lifecycle and a behavioural cohort over HTTP → the experiment
// results job → a person's deletion and its receipt → a retention run. Both stores give identical answers.
import { execFileSync } from 'node:child_process';
import { createClient } from '@clickhouse/client';
import { afterAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../shared/platform/config.ts';
import { initOrm } from '../../shared/platform/db/orm.ts';
import { enqueue, type JobKind, type JobData } from '../../shared/platform/jobs.ts';
import { createQueues } from '../../shared/platform/queues.ts';
import { createWorkerRedis } from '../../shared/platform/redis.ts';
import { chdbDatabase } from '../clickhouse.ts';
import { sql } from '../db.ts';
import { CHECKOUT_METRICS, capture } from '../fixtures.ts';
import { call, createAccount, eventually, ownDatabase, settledJob, uniqueRedisPrefix } from '../helpers.ts';
import { root, startApiProcess, startClickHouseServer, startWorkerProcess, type ServiceProcess } from '../services.ts';

const running: ServiceProcess[] = [];
const closing: Array<() => Promise<unknown>> = [];
afterAll(async () => {
  for (const close of closing.reverse()) await close().catch(() => undefined);
  await Promise.all(running.map((p) => p.stop()));
});

/** One anchor for both journeys: the experiment's days are the same whichever runs first. */
const NOW = Date.now();
const DAY = 86_400_000;
const today = Date.UTC(new Date(NOW).getUTCFullYear(), new Date(NOW).getUTCMonth(), new Date(NOW).getUTCDate());
const recent = (days: number, hour: number) => new Date(today - days * DAY + hour * 3600_000).toISOString();
const march = (d: number, h = 12) => `2026-03-${String(d).padStart(2, '0')}T${String(h).padStart(2, '0')}:00:00Z`;

const FUNNEL = `?events=${encodeURIComponent(
  JSON.stringify([
    { id: 'signup', order: 0 },
    { id: 'activate', order: 1 },
    { id: 'pay', order: 2 },
  ]),
)}&date_from=2026-03-01&date_to=2026-03-10`;
const HELPED = encodeURIComponent('{"id":"help","type":"events"}');

async function journey(engine: 'postgres' | 'clickhouse') {
  const database = await ownDatabase(`journey_${engine}`);
  const env: Record<string, string> = {
    DATABASE_URL: database,
    DATABASE_DIRECT_URL: database,
    REDIS_PREFIX: uniqueRedisPrefix(),
    EVENT_STORE: engine,
    EVENT_SHIP_SETTLE_SECONDS: '0',
    EVENT_BUFFER_HOURS: '1',
    DELETION_RECONCILE_SECONDS: '1',
  };
  let clickhouseCount: (() => Promise<number>) | null = null;
  if (engine === 'clickhouse') {
    const front = await startClickHouseServer();
    running.push(front);
    env.CLICKHOUSE_URL = front.url;
    env.CLICKHOUSE_DATABASE = chdbDatabase('journey');
    const client = createClient({ url: front.url });
    closing.push(() => client.close());
    clickhouseCount = async () => {
      const [row] = await client
        .query({ query: `SELECT count() AS n FROM ${env.CLICKHOUSE_DATABASE}.events`, format: 'JSONEachRow' })
        .then((r) => r.json<{ n: string }>());
      return Number(row.n);
    };
  }
  // As `npm run migrate` (ClickHouse's schema too); ownDatabase has PostgreSQL's already.
  execFileSync(process.execPath, ['scripts/migrate.ts'], { cwd: root, env: { ...process.env, ...env } });
  const api = await startApiProcess(env);
  running.push(api);
  const worker = startWorkerProcess(env);
  running.push(worker);

  const orm = await initOrm(database, 2);
  closing.push(() => orm.close());
  const connection = createWorkerRedis();
  closing.push(async () => connection.disconnect());
  const queues = createQueues(connection, loadConfig({ ...process.env, ...env }));
  closing.push(() => Promise.all(Object.values(queues).map((q) => q.close())));
  /** A job run by the worker process; resolves once it completed. */
  const run = async <K extends JobKind>(kind: K, data: JobData[K]) => {
    const job = await enqueue(queues, kind, data);
    const settled = await settledJob(queues[job.queueName === 'maintenance' ? 'maintenance' : 'deletions'], job);
    expect(await settled.isCompleted(), `${kind}: ${settled.failedReason}`).toBe(true);
    return settled.returnvalue;
  };

  const account = await createAccount(orm);
  const P = `/api/projects/${account.projectId}`;
  const get = async (path: string) => {
    const res = await call(api.baseUrl, 'GET', `${P}${path}`, { key: account.apiKey });
    expect(res.status, `${path}: ${res.text}`).toBe(200);
    return res.body;
  };
  const people = (body: any) => body.results[0].people.map((p: any) => p.distinct_ids[0]).sort();

  // u1 completes signup → activate → pay; u2 stops after activate; u3 only signs up (and asks for help);
  // u4 activates before signing up. Then an experiment's exposures and purchases in the last two days.
  await capture(api.baseUrl, account.projectToken, [
    { event: 'signup', distinct_id: 'u1', timestamp: march(2), properties: { $set: { plan: 'free' } } },
    { event: 'activate', distinct_id: 'u1', timestamp: march(3) },
    { event: 'pay', distinct_id: 'u1', timestamp: march(4), properties: { $set: { plan: 'pro' } } },
    { event: 'signup', distinct_id: 'u2', timestamp: march(2) },
    { event: 'activate', distinct_id: 'u2', timestamp: march(5) },
    { event: 'signup', distinct_id: 'u3', timestamp: march(3) },
    { event: 'help', distinct_id: 'u3', timestamp: march(3, 13) },
    { event: 'activate', distinct_id: 'u4', timestamp: march(1) },
    { event: 'signup', distinct_id: 'u4', timestamp: march(2) },
  ]);
  const experiment = (
    await call(api.baseUrl, 'POST', `${P}/experiments/`, {
      key: account.apiKey,
      body: {
        name: 'Checkout',
        feature_flag_key: 'checkout',
        start_date: new Date(today - DAY).toISOString(),
        metrics: [...CHECKOUT_METRICS],
      },
    })
  ).body;
  const exposed = (id: string, variant: string, days: number) => ({
    event: '$feature_flag_called',
    distinct_id: id,
    timestamp: recent(days, 1),
    properties: { $feature_flag: 'checkout', $feature_flag_response: variant },
  });
  await capture(api.baseUrl, account.projectToken, [
    exposed('c1', 'control', 1),
    exposed('c2', 'control', 1),
    exposed('t1', 'test', 1),
    { event: 'purchase', distinct_id: 'c1', timestamp: recent(1, 2), properties: { amount: 10 } },
    { event: 'cart', distinct_id: 't1', timestamp: recent(1, 2) },
    { event: 'purchase', distinct_id: 't1', timestamp: recent(1, 3), properties: { amount: 5 } },
    { event: 'purchase', distinct_id: 't1', timestamp: recent(1, 4), properties: { amount: 7 } },
  ]);
  const captured = 16;

  if (clickhouseCount) {
    // March's events arrived two hours ago as far as the buffer knows (before any shipping, so arrival
    // order holds): the worker ships everything, then trims them from PostgreSQL. From here on
    // ClickHouse alone holds them, and every answer about them comes from it.
    await sql(orm, `update event set created_at = created_at - interval '2 hours' where timestamp < '2026-04-01'`);
    await run('shipEvents', {});
    expect(await clickhouseCount()).toBe(captured);
    const [left] = await sql<{ n: number }>(orm, `select count(*)::int as n from event where timestamp < '2026-04-01'`);
    expect(left.n).toBe(0);
  }

  const answers: Record<string, unknown> = {};
  answers.reached2 = people(await get(`/persons/funnel/${FUNNEL}&funnel_step=2`));
  answers.droppedBefore3 = people(await get(`/persons/funnel/${FUNNEL}&funnel_step=-3`));
  answers.correlation = people(
    await get(
      `/persons/funnel/correlation/${FUNNEL}&funnel_correlation_person_entity=${HELPED}&funnel_correlation_person_converted=false`,
    ),
  );
  answers.lifecycle = {
    new: people(await get('/persons/lifecycle/?target_date=2026-03-02&lifecycle_type=new')),
    returning: people(await get('/persons/lifecycle/?target_date=2026-03-03&lifecycle_type=returning')),
    dormant: people(await get('/persons/lifecycle/?target_date=2026-03-03&lifecycle_type=dormant')),
    resurrecting: people(await get('/persons/lifecycle/?target_date=2026-03-05&lifecycle_type=resurrecting')),
  };
  const [{ id: payers }] = await sql<{ id: number }>(
    orm,
    `insert into cohort (project_id, name, is_static, filters, count) values (?, 'payers', false, ?::jsonb, 1) returning id`,
    [
      account.projectId,
      JSON.stringify({
        properties: {
          type: 'AND',
          values: [
            {
              type: 'behavioral',
              value: 'performed_event',
              key: 'pay',
              event_type: 'events',
              explicit_datetime: '2026-03-01T00:00:00Z',
            },
          ],
        },
      }),
    ],
  );
  const cohortFilter = encodeURIComponent(JSON.stringify([{ type: 'cohort', key: 'id', value: payers }]));
  answers.cohort = (await get(`/persons/?properties=${cohortFilter}`)).results.map((p: any) => p.distinct_ids[0]);

  // The experiment results job, on demand through the queue, as the API asks for it.
  const started = await call(api.baseUrl, 'POST', `${P}/experiments/${experiment.id}/recalculate_timeseries/`, {
    key: account.apiKey,
  });
  expect(started.status).toBe(202);
  answers.experiment = await Promise.all(
    experiment.metrics.map(async (m: { uuid: string; fingerprint: string }) => {
      const done = await eventually(async () => {
        const body = await get(
          `/experiments/${experiment.id}/timeseries_results/?metric_uuid=${m.uuid}&fingerprint=${m.fingerprint}`,
        );
        return body.status === 'completed' ? body : null;
      }, 60_000);
      // Each day's variants as computed (when they were computed differs between the runs).
      return Object.fromEntries(
        Object.entries(done.timeseries as Record<string, any>).map(([day, result]) => [
          day,
          result && { baseline: result.baseline, variant_results: result.variant_results },
        ]),
      );
    }),
  );

  // A person's deletion with its events, released now rather than on Sunday; its receipt counts the
  // events once (on ClickHouse: those only ClickHouse holds).
  const u3 = (await get('/persons/?distinct_id=u3')).results[0];
  const gone = await call(api.baseUrl, 'DELETE', `${P}/persons/${u3.uuid}/?delete_events=true`, {
    key: account.apiKey,
  });
  expect(gone.status).toBe(204);
  await run('releaseDeletions', { mode: 'weekly' });
  const receipt = await eventually(async () => {
    const list = await get(`/persons/deletion_receipts/?person_uuid=${u3.uuid}`);
    return list.results[0] ?? null;
  }, 60_000);
  const { verified_by: verifiedBy, ...counted } = receipt.receipt.stores.events;
  answers.receiptEvents = counted;
  // The statement that found nothing left is the engine's own (ClickHouse's names its events table).
  expect(verifiedBy).toContain(clickhouseCount ? `${env.CLICKHOUSE_DATABASE}.events` : 'from event where');
  answers.afterDeletion = people(await get(`/persons/funnel/${FUNNEL}&funnel_step=1`));
  if (clickhouseCount) expect(await clickhouseCount()).toBe(captured - 2);

  // Retention: 30 days keeps the experiment's events and removes March's.
  const patched = await call(api.baseUrl, 'PATCH', `${P}/`, {
    key: account.apiKey,
    body: { event_retention_days: 30 },
  });
  expect(patched.status, patched.text).toBe(200);
  answers.preview = (await get('/retention/preview/')).events;
  await run('retention', {});
  answers.retention = (await get('/retention/runs/')).results.map((r: any) => r.events_deleted ?? r.events);
  answers.afterRetention = people(await get(`/persons/funnel/${FUNNEL}&funnel_step=1`));
  if (clickhouseCount) expect(await clickhouseCount()).toBe(7);
  return answers;
}

describe('API and worker processes on each event store', () => {
  it('give identical answers on PostgreSQL and on ClickHouse over HTTP', async () => {
    const postgres = await journey('postgres');
    // What the journey answers, checked by hand on PostgreSQL …
    expect(postgres).toMatchObject({
      reached2: ['u1', 'u2'],
      droppedBefore3: ['u2'],
      correlation: ['u3'],
      lifecycle: { new: ['u1', 'u2'], returning: ['u1'], dormant: ['u2', 'u4'], resurrecting: ['u2'] },
      cohort: ['u1'],
      receiptEvents: { before: 2, after: 0 },
      afterDeletion: ['u1', 'u2', 'u4'],
      retention: [7],
      afterRetention: [],
    });
    // … and the same on ClickHouse.
    expect(await journey('clickhouse')).toEqual(postgres);
  }, 400_000);
});
