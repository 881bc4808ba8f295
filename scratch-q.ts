import { createClient, type ClickHouseClientConfigOptions } from '@clickhouse/client';
import { createChdbConnection } from 'chdb/connection';
const client = createClient({ connection: createChdbConnection({ path: '/work/scratch/chdb' }) as unknown as ClickHouseClientConfigOptions['connection'] });
const DAY = 86400_000;
const T0 = Date.parse('2026-08-01T00:00:00Z');
const start = (T0 + 30 * DAY + 9 * 3600_000) * 1000, until = (T0 + 61 * DAY) * 1000, first = (T0 + 30 * DAY) * 1000;
const map = `SELECT distinct_id, argMax(person_id, version) AS person_id FROM bench.person_distinct_id WHERE project_id = 1 GROUP BY distinct_id HAVING argMax(is_deleted, version) = 0`;
const q: Record<string, string> = {
  exp1: `SELECT count(), sum(left_at > 0) FROM (SELECT person_id, xs[1].2 AS variant, xs[1].1 AS t0, if(length(xs) > 1, xs[2].1, toInt64(0)) AS left_at FROM (SELECT person_id, arraySort(groupArray((first_t, variant))) AS xs
            FROM (SELECT d.person_id AS person_id, e.variant AS variant, min(e.t) AS first_t
                    FROM (SELECT distinct_id, toUnixTimestamp64Micro(timestamp) AS t, JSONExtractString(properties, '$feature_flag_response') AS variant
                            FROM bench.events WHERE project_id = 1 AND event = '$feature_flag_called' AND toUnixTimestamp64Micro(timestamp) >= ${start} AND toUnixTimestamp64Micro(timestamp) < ${until}
                             AND JSONExtractString(properties, '$feature_flag') = 'bench-experiment' AND variant IN ('control','test')) AS e
                    INNER JOIN (${map}) AS d ON d.distinct_id = e.distinct_id GROUP BY person_id, variant) GROUP BY person_id))`,
  exp2: `SELECT count(), sum(left_at > 0) FROM (SELECT person_id, arraySort((v, t) -> t, mm.1, mm.2) AS vs, arraySort(mm.2) AS ts, vs[1] AS variant, ts[1] AS t0, if(length(ts) > 1, ts[2], toInt64(0)) AS left_at FROM (SELECT d.person_id AS person_id, minMap([e.variant], [e.t]) AS mm
                    FROM (SELECT distinct_id, toUnixTimestamp64Micro(timestamp) AS t, JSONExtractString(properties, '$feature_flag_response') AS variant
                            FROM bench.events WHERE project_id = 1 AND event = '$feature_flag_called' AND timestamp >= fromUnixTimestamp64Micro(${start}) AND timestamp < fromUnixTimestamp64Micro(${until})
                             AND JSONExtractString(properties, '$feature_flag') = 'bench-experiment' AND variant IN ('control','test')) AS e
                    INNER JOIN (${map}) AS d ON d.distinct_id = e.distinct_id GROUP BY person_id))`,
  ev1: `SELECT count(), sum(length(evs)) FROM (SELECT d.person_id AS person_id, arraySort(groupArray((e.t, e.event, e.vn, e.vd))) AS evs
    FROM (SELECT distinct_id, event, toUnixTimestamp64Micro(timestamp) AS t, toFloat64(event = 'purchase') AS vn, toFloat64(0) AS vd FROM bench.events
           WHERE project_id = 1 AND event IN ('purchase') AND toUnixTimestamp64Micro(timestamp) >= ${start} AND toUnixTimestamp64Micro(timestamp) < ${until} LIMIT 1 BY uuid) AS e
    INNER JOIN (${map}) AS d ON d.distinct_id = e.distinct_id GROUP BY person_id)`,
  ev2: `SELECT count(), sum(length(evs)) FROM (SELECT d.person_id AS person_id, arraySort(groupArray((e.t, e.vn))) AS evs
    FROM (SELECT distinct_id, toUnixTimestamp64Micro(timestamp) AS t, toFloat64(1) AS vn FROM bench.events
           WHERE project_id = 1 AND event IN ('purchase') AND timestamp >= fromUnixTimestamp64Micro(${start}) AND timestamp < fromUnixTimestamp64Micro(${until}) LIMIT 1 BY uuid) AS e
    INNER JOIN (${map}) AS d ON d.distinct_id = e.distinct_id GROUP BY person_id)`,
  ev3: `SELECT count(), sum(length(evs)) FROM (SELECT d.person_id AS person_id, arraySort(groupArray((e.t, e.vn))) AS evs
    FROM (SELECT distinct_id, toUnixTimestamp64Micro(timestamp) AS t, toFloat64(1) AS vn FROM bench.events
           WHERE project_id = 1 AND event IN ('$pageview') AND timestamp >= fromUnixTimestamp64Micro(${start}) AND timestamp < fromUnixTimestamp64Micro(${until}) LIMIT 1 BY uuid) AS e
    INNER JOIN (${map}) AS d ON d.distinct_id = e.distinct_id GROUP BY person_id)`,
  ev4: `SELECT count(), sum(length(evs)) FROM (SELECT d.person_id AS person_id, arraySort(groupArray((e.t, e.vn))) AS evs
    FROM (SELECT distinct_id, toUnixTimestamp64Micro(timestamp) AS t, toFloat64(1) AS vn FROM bench.events
           WHERE project_id = 1 AND event IN ('$pageview') AND timestamp >= fromUnixTimestamp64Micro(${start}) AND timestamp < fromUnixTimestamp64Micro(${until})) AS e
    INNER JOIN (${map}) AS d ON d.distinct_id = e.distinct_id GROUP BY person_id)`,
  map: `SELECT count() FROM (${map})`,
  scanpv: `SELECT count() FROM bench.events WHERE project_id = 1 AND event IN ('$pageview') AND timestamp >= fromUnixTimestamp64Micro(${start}) AND timestamp < fromUnixTimestamp64Micro(${until})`,
  scanpvu: `SELECT count() FROM (SELECT uuid FROM bench.events WHERE project_id = 1 AND event IN ('$pageview') AND timestamp >= fromUnixTimestamp64Micro(${start}) AND timestamp < fromUnixTimestamp64Micro(${until}) LIMIT 1 BY uuid)`,
};
const only = process.argv.slice(2);
for (let rep = 0; rep < 3; rep++) {
  const out: string[] = [];
  for (const [k, sql] of Object.entries(q)) {
    if (only.length && !only.includes(k)) continue;
    const t = performance.now();
    const r = await (await client.query({ query: sql, format: 'JSONCompactEachRow' })).json();
    out.push(`${k} ${(performance.now() - t).toFixed(0)}ms ${JSON.stringify(r)}`);
  }
  console.log(out.join(' | '));
}
await client.close();
