// The event store's two engines on the same data: the persons funnel (a conversion and a drop-off)
// answered by PostgreSQL and by ClickHouse (chDB, the same engine as a server, in this process),
// and how fast the shipper copies PostgreSQL's events to ClickHouse. Both funnels must agree; the
// figures are medians of repeated runs in this process, and their ratio.
import { randomUUID } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createClient, type ClickHouseClientConfigOptions } from '@clickhouse/client';
import { createChdbConnection } from 'chdb/connection';
import type { EntityManager } from '@mikro-orm/postgresql';
import { benchSetup } from './harness.ts';
import { percentile, progress, timed } from './stats.ts';
import { createClickHouseEventStore } from '../shared/events/clickhouse.ts';
import { createPostgresEventStore } from '../shared/events/postgres.ts';
import { shipEvents } from '../shared/events/shipper.ts';
import { storeEvents, type EventRow } from '../shared/events/store.ts';
import type { FunnelParams } from '../shared/events/event-store.ts';

const PERSONS = Number(process.env.BENCH_PERSONS ?? 20_000);
const EVENTS_PER_PERSON = 10;
const RUNS = Number(process.env.BENCH_RUNS ?? 5);
const STEPS = ['signup', 'activate', 'pay'];
const T0 = Date.parse('2026-02-01T00:00:00Z');

const { orm, account, pool } = await benchSetup();
const projectId = account.projectId;
const em = () => orm.em.fork() as EntityManager;
console.log(
  `event store: ${PERSONS} persons × ${EVENTS_PER_PERSON} events, funnel of ${STEPS.length} steps, ${RUNS} runs`,
);

// Persons with one distinct id each; events over 30 days, step events with falling frequency.
await pool.query(
  `insert into person (uuid, project_id, created_at) select gen_random_uuid(), $1, now() from generate_series(1, $2)`,
  [projectId, PERSONS],
);
await pool.query(
  `insert into person_distinct_id (project_id, person_id, distinct_id)
   select $1, id, 'bench-' || id from person where project_id = $1`,
  [projectId],
);
const { rows: persons } = await pool.query<{ id: string; uuid: string }>(
  `select id::text, uuid::text from person where project_id = $1`,
  [projectId],
);
const arrived = new Date(Date.now() - 3_600_000);
let stored = 0;
for (let i = 0; i < persons.length; i += 500) {
  const batch: EventRow[] = [];
  for (const p of persons.slice(i, i + 500))
    for (let k = 0; k < EVENTS_PER_PERSON; k++) {
      const r = (Number(p.id) * 7919 + k * 104729) % 1000;
      const event = k === 0 ? 'signup' : r < 300 ? 'activate' : r < 400 ? 'pay' : 'pageview';
      batch.push({
        uuid: randomUUID(),
        projectId,
        event,
        distinctId: `bench-${p.id}`,
        personId: p.uuid,
        properties: { k },
        timestamp: new Date(T0 + ((Number(p.id) * 15_485_863 + k * 86_400_007) % (30 * 86_400_000))),
      });
    }
  await storeEvents(em(), batch, arrived);
  stored += batch.length;
  progress(`stored ${stored} events in PostgreSQL`);
}
console.log();

const connection = createChdbConnection({ path: mkdtempSync(join(tmpdir(), 'bench-chdb-')) });
const client = createClient({ connection: connection as unknown as ClickHouseClientConfigOptions['connection'] });
const ch = createClickHouseEventStore(client, 'bench', orm);
await ch.migrate();
const pg = createPostgresEventStore(orm, { deleteChunk: 100_000 });
// Only this run's events: the mark starts at this run's first arrival.
await pool.query(`delete from event_shipment`);
await pool.query(
  `insert into event_shipment (target, created_at, uuid) values ('clickhouse', $1::timestamptz - interval '1 second', '00000000-0000-0000-0000-000000000000')`,
  [arrived],
);
let shipped = 0;
const shipMs = await timed(async () => {
  for (;;) {
    const r = await shipEvents(orm, ch, { batchSize: 20_000, settleSeconds: 0, maxBatches: 1 });
    shipped += r.events;
    progress(`shipped ${shipped} events to ClickHouse`);
    if (r.events === 0) break;
  }
});
console.log(
  `\nshipping: ${shipped} events in ${(shipMs / 1000).toFixed(1)} s = ${Math.round(shipped / (shipMs / 1000))} events/s`,
);

const funnel: FunnelParams = { steps: STEPS, from: new Date(T0), to: new Date(T0 + 31 * 86_400_000), windowDays: 14 };
for (const step of [3, -2]) {
  const page = { limit: 100, offset: 0 };
  const answers = await Promise.all([pg, ch].map((s) => s.funnelPersonIds(projectId, funnel, step, page)));
  if (JSON.stringify(answers[0]) !== JSON.stringify(answers[1]))
    throw new Error(`funnel step ${step}: the engines disagree`);
  const ms: Record<string, number[]> = { postgres: [], clickhouse: [] };
  for (let run = 0; run < RUNS; run++)
    for (const store of [pg, ch])
      ms[store.engine].push(await timed(() => store.funnelPersonIds(projectId, funnel, step, page)));
  const [p, c] = [percentile(ms.postgres, 50), percentile(ms.clickhouse, 50)];
  console.log(
    `funnel step ${step} (${answers[0].count} persons): postgres p50 ${p.toFixed(0)} ms, clickhouse p50 ${c.toFixed(0)} ms, ratio ${(p / c).toFixed(2)}`,
  );
}

await pool.query(`delete from event where project_id = $1`, [projectId]);
await pool.query(`delete from event_shipment`);
await pool.query(`delete from person_distinct_id_change`);
await pool.end();
await orm.close();
