import { dayChangesStatement } from './shared/events/clickhouse-experiment.ts';
import { writeFileSync } from 'node:fs';
const DAY = 86400_000;
const T0 = Date.parse('2026-08-01T00:00:00Z');
const map = `SELECT distinct_id, argMax(person_id, version) AS person_id FROM bench.person_distinct_id WHERE project_id = {project:Int64} GROUP BY distinct_id HAVING argMax(is_deleted, version) = 0`;
const req = { flagKey: 'bench-experiment', variants: ['control', 'test'], start: new Date(T0 + 30 * DAY + 9 * 3600_000), until: new Date(T0 + 61 * DAY), firstDay: new Date(T0 + 30 * DAY), days: 31, lookbackDays: 0, metrics: [] };
const st = dayChangesStatement('bench', map, 1, req, { kind: 'mean', event: '$pageview', property: null });
writeFileSync('/tmp/pv.sql', st.sql);
writeFileSync('/tmp/pv.json', JSON.stringify(st.params));
