import { createClient, type ClickHouseClientConfigOptions } from '@clickhouse/client';
import { createChdbConnection } from 'chdb/connection';
import { mkdirSync } from 'node:fs';
import { createClickHouseEventStore, jsonText } from './shared/events/index.ts';
import type { EngineMetric } from './shared/events/index.ts';

const path = '/work/scratch/chdb';
mkdirSync(path, { recursive: true });
const client = createClient({ connection: createChdbConnection({ path }) as unknown as ClickHouseClientConfigOptions['connection'] });
const ch = createClickHouseEventStore(client, 'bench', { em: null as never });
await ch.migrate();
const count = async (q: string) => Number((await (await client.query({ query: q, format: 'JSONEachRow' })).json<{ n: string }>())[0].n);
const DAY = 86400_000;
const T0 = Date.parse('2026-08-01T00:00:00Z');
if ((await count('SELECT count() AS n FROM bench.events')) === 0) {
  console.log('generating');
  await client.command({
    query: `INSERT INTO bench.person_distinct_id (project_id, distinct_id, person_id, person_created_at, is_deleted, version)
            SELECT 1, concat('d', toString(number)), number + 1, toDateTime64('2026-07-01 00:00:00', 6, 'UTC'), 0, 1 FROM numbers(200000)`,
  });
  await client.command({
    query: `INSERT INTO bench.events (uuid, project_id, event, distinct_id, person_id, properties, timestamp, created_at)
      SELECT generateUUIDv4(), 1, ev, concat('d', toString(p)), NULL,
             multiIf(ev = 'purchase', concat('{"amount":', toString(round((cityHash64(number, 7) % 10000) / 100, 2)), '}'),
                     ev = '$feature_flag_called', concat('{"$feature_flag":"bench-experiment","$feature_flag_response":"', if((cityHash64(p) % 100) < 1 AND (number % 3 = 0), 'test', if(cityHash64(p) % 2 = 0, 'control', 'test')), '"}'),
                     '{}'),
             fromUnixTimestamp64Micro(toInt64(${T0 * 1000} + (cityHash64(number, 3) % ${90 * DAY * 1000}))), now64(6)
        FROM (SELECT number, number % 200000 AS p,
                     multiIf(cityHash64(number, 5) % 100 < 10, '$feature_flag_called', cityHash64(number, 5) % 100 < 14, 'purchase',
                             cityHash64(number, 5) % 100 < 24, 'cart', cityHash64(number, 5) % 100 < 70, '$pageview', '$autocapture') AS ev
                FROM numbers(10000000))`,
  });
  await client.command({ query: 'OPTIMIZE TABLE bench.events FINAL' });
}
console.log('events', await count('SELECT count() AS n FROM bench.events'));
const start = new Date(T0 + 30 * DAY + 9 * 3600_000);
const until = new Date(T0 + 61 * DAY);
const metrics: EngineMetric[] = [
  { kind: 'mean', event: 'purchase', property: 'amount' },
  { kind: 'funnel', events: ['cart', 'purchase'] },
  { kind: 'mean', event: '$pageview', property: null },
];
const request = (lookbackDays: number, ms = metrics) => ({
  flagKey: 'bench-experiment', variants: ['control', 'test'], start, until,
  firstDay: new Date(T0 + 30 * DAY), days: 31, lookbackDays, metrics: ms,
});
const map = `SELECT distinct_id, argMax(person_id, version) AS person_id FROM bench.person_distinct_id
              WHERE project_id = {p:Int64} GROUP BY distinct_id HAVING argMax(is_deleted, version) = 0`;
const range = `project_id = {p:Int64} AND timestamp >= parseDateTime64BestEffort({start:String}, 6, 'UTC')
               AND timestamp < parseDateTime64BestEffort({until:String}, 6, 'UTC')`;
const exposures = `SELECT d.person_id AS person_id, any(e.r) AS variant, min(e.timestamp) AS t0
    FROM (SELECT distinct_id, timestamp, JSONExtractString(properties, '$feature_flag_response') AS r FROM bench.events
           WHERE ${range} AND event = '$feature_flag_called' AND JSONExtractString(properties, '$feature_flag') = {flag:String}
             AND r IN ('control', 'test') LIMIT 1 BY uuid) AS e
    INNER JOIN (${map}) AS d ON d.distinct_id = e.distinct_id
   GROUP BY d.person_id HAVING uniqExact(e.r) = 1`;
const personEvents = (names: string, value: string) => `SELECT d.person_id AS person_id, e.event AS event,
         toUnixTimestamp64Micro(e.timestamp) AS t, ${value} AS v
    FROM (SELECT distinct_id, event, timestamp, properties FROM bench.events
           WHERE ${range} AND event IN (${names}) LIMIT 1 BY uuid) AS e
    INNER JOIN (${map}) AS d ON d.distinct_id = e.distinct_id`;
const chMean = (event: string, value: string) => `SELECT variant, count() AS n, sum(v) AS sum, sum(v * v) AS sum_squares
    FROM (SELECT x.person_id, x.variant, sumIf(m.v, m.t >= toUnixTimestamp64Micro(x.t0)) AS v
            FROM (${exposures}) AS x LEFT JOIN (${personEvents(`'${event}'`, value)}) AS m ON m.person_id = x.person_id
           GROUP BY x.person_id, x.variant)
   GROUP BY variant ORDER BY variant`;
const chFunnel = `SELECT variant, count() AS n, countIf(s1 > 0) AS step1, countIf(s2 > 0) AS step2
    FROM (SELECT variant, arrayMin(arrayFilter(c -> c >= t0, carts)) AS s1,
                 if(s1 > 0, arrayMin(arrayFilter(b -> b >= s1, buys)), 0) AS s2
            FROM (SELECT x.person_id, x.variant, toUnixTimestamp64Micro(any(x.t0)) AS t0,
                         groupArrayIf(f.t, f.event = 'cart') AS carts, groupArrayIf(f.t, f.event = 'purchase') AS buys
                    FROM (${exposures}) AS x LEFT JOIN (${personEvents(`'cart', 'purchase'`, '0')}) AS f ON f.person_id = x.person_id
                   GROUP BY x.person_id, x.variant))
   GROUP BY variant ORDER BY variant`;
const amount = `ifNull(toFloat64OrNull(trimBoth(${jsonText('e.properties', "'amount'")})), 0)`;
const best = [chMean('purchase', amount), chFunnel, chMean('$pageview', '1')];
const params = { p: 1, flag: 'bench-experiment', start: start.toISOString(), until: until.toISOString() };
const timed = async (f: () => Promise<unknown>) => { const t = performance.now(); await f(); return performance.now() - t; };
const which = process.argv[2] ?? 'all';
for (let rep = 0; rep < 3; rep++) {
  const b = [];
  for (const q of best) b.push(await timed(async () => (await client.query({ query: q, query_params: params, format: 'JSONEachRow' })).json()));
  const s = [];
  for (const m of metrics) s.push(await timed(() => ch.experimentDayChanges!(1, request(0, [m]))));
  const all = await timed(() => ch.experimentDayChanges!(1, request(0)));
  const cuped = which === 'cuped' ? await timed(() => ch.experimentDayChanges!(1, request(14))) : 0;
  console.log(`best ${b.map((x) => x.toFixed(0)).join(' ')} = ${b.reduce((a, c) => a + c).toFixed(0)} | store per metric ${s.map((x) => x.toFixed(0)).join(' ')} = ${s.reduce((a, c) => a + c).toFixed(0)}; all at once ${all.toFixed(0)}${cuped ? `; cuped ${cuped.toFixed(0)}` : ''}`);
}
await client.close();
