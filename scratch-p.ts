import { createClient, type ClickHouseClientConfigOptions } from '@clickhouse/client';
import { createChdbConnection } from 'chdb/connection';
import { dayChangesStatement } from './shared/events/clickhouse-experiment.ts';
const client = createClient({ connection: createChdbConnection({ path: '/work/scratch/chdb' }) as unknown as ClickHouseClientConfigOptions['connection'] });
const DAY = 86400_000;
const T0 = Date.parse('2026-08-01T00:00:00Z');
const map = `SELECT distinct_id, argMax(person_id, version) AS person_id FROM bench.person_distinct_id WHERE project_id = {project:Int64} GROUP BY distinct_id HAVING argMax(is_deleted, version) = 0`;
const req = { flagKey: 'bench-experiment', variants: ['control', 'test'], start: new Date(T0 + 30 * DAY + 9 * 3600_000), until: new Date(T0 + 61 * DAY), firstDay: new Date(T0 + 30 * DAY), days: 31, lookbackDays: 0, metrics: [] };
const metric = process.argv[2] === 'funnel' ? { kind: 'funnel' as const, events: ['cart', 'purchase'] } : process.argv[2] === 'rev' ? { kind: 'mean' as const, event: 'purchase', property: 'amount' } : { kind: 'mean' as const, event: '$pageview', property: null };
const st = dayChangesStatement('bench', map, 1, req, metric);
const variants: Record<string, string> = {
  full: st.sql,
  persons: 'SELECT count(), sum(length(evs)) FROM ' + st.sql.slice(st.sql.indexOf('(SELECT d.person_id AS person_id'), st.sql.lastIndexOf(')')).replace(/\)\s*$/, ''),
  scanjoin: 'SELECT count() FROM ' + st.sql.slice(st.sql.indexOf('(SELECT distinct_id, toUnixTimestamp64Micro'), st.sql.indexOf('GROUP BY person_id')),
  nolimit: st.sql.replace('LIMIT 1 BY uuid', ''),
  sortt: st.sql.replace('arraySort(groupArray((e.t, e.k, e.vn, e.vd, e.r)))', 'arraySort(p -> p.1, groupArray((e.t, e.k, e.vn, e.vd, e.r)))'),
  nosort: st.sql.replace('arraySort(groupArray((e.t, e.k, e.vn, e.vd, e.r)))', 'groupArray((e.t, e.k, e.vn, e.vd, e.r))'),
};
if (process.argv[3]) console.log(variants[process.argv[3]]);
for (let rep = 0; rep < 3; rep++) {
  const out: string[] = [];
  for (const [k, sql] of Object.entries(variants)) {
    const t = performance.now();
    const r = await (await client.query({ query: sql, query_params: st.params, format: 'JSONCompactEachRow' })).json();
    out.push(`${k} ${(performance.now() - t).toFixed(0)}ms ${JSON.stringify(r).slice(0, 60)}`);
  }
  console.log(out.join(' | '));
}
await client.close();
