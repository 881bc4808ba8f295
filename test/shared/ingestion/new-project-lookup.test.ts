// Ingestion finds each event's person by (project, distinct id) with one index probe per id. In a
// project newer than the table's statistics the planner believes the project holds next to no rows;
// an index led by project_id alone then costs the same as the unique (project_id, distinct_id) one,
// and if it is picked, every probe reads the whole project's ids: ingestion into a new project slows
// as the project grows, until autovacuum analyzes the table (seen in bench/ingestion: the lookup took
// 0.4 ms in the first request and 30 ms after 30 requests of 100 events).
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { initOrm } from '../../../shared/platform/db/orm.ts';
import { db } from '../../../shared/platform/db/kysely.ts';
import { personsOf } from '../../../shared/persons/ingest.ts';
import { createAccount, ownDatabase } from '../../helpers.ts';

let url: string;
let orm: Awaited<ReturnType<typeof initOrm>>;
let client: pg.Client;

beforeAll(async () => {
  url = await ownDatabase('new_project_lookup');
  orm = await initOrm(url, 2);
  client = new pg.Client({ connectionString: url });
  await client.connect();
});
afterAll(async () => {
  await client?.end();
  await orm?.close();
});

/** `n` persons of the project, each with one distinct id `${prefix}-i`. */
async function persons(projectId: number, prefix: string, n: number) {
  await client.query(
    `with p as (insert into person (uuid, project_id, properties) select gen_random_uuid(), $1, '{}' from generate_series(1, $2::int) g returning id)
     insert into person_distinct_id (project_id, person_id, distinct_id)
     select $1, id, $3 || '-' || row_number() over (order by id) from p`,
    [projectId, n, prefix],
  );
}

interface PlanNode {
  'Relation Name'?: string;
  'Index Name'?: string;
  'Rows Removed by Filter'?: number;
  'Actual Loops'?: number;
  Plans?: PlanNode[];
}
const nodes = (n: PlanNode): PlanNode[] => [n, ...(n.Plans ?? []).flatMap(nodes)];

it('finds the persons of a project newer than the statistics with one probe per distinct id', async () => {
  const older = await createAccount(orm);
  await persons(older.projectId, 'old', 5000);
  await client.query('analyze person, person_distinct_id');
  // Created after the statistics were taken, and grown since.
  const fresh = await createAccount(orm);
  await persons(fresh.projectId, 'user', 3000);

  const ids = [
    ...Array.from({ length: 50 }, (_, i) => `user-${i * 60 + 1}`),
    ...Array.from({ length: 50 }, (_, i) => `new-${i}`),
  ];
  const query = personsOf(db(orm.em.fork()), ids, fresh.projectId).compile();
  const [{ 'QUERY PLAN': plan }] = (
    await client.query(`explain (analyze, buffers, format json) ${query.sql}`, [...query.parameters])
  ).rows as [{ 'QUERY PLAN': [{ Plan: PlanNode & { 'Shared Hit Blocks': number; 'Shared Read Blocks': number } }] }];
  const probes = nodes(plan[0].Plan).filter((n) => n['Relation Name'] === 'person_distinct_id');
  expect(probes.map((n) => n['Index Name'])).toEqual(['person_distinct_id_project_id_distinct_id_key']);
  expect(probes[0]['Rows Removed by Filter'] ?? 0).toBe(0);
  // A probe is an index descent and a row or two: not the project's 3000 ids.
  const blocks = plan[0].Plan['Shared Hit Blocks'] + plan[0].Plan['Shared Read Blocks'];
  expect(blocks / ids.length).toBeLessThan(20);
});
