// Filters that no general index serves (numeric comparisons, substrings of any property) can be served by
// an index an operator makes on a hot property (shared/persons/property-indexes.ts). Pinned here: the
// list's plan uses the numeric index for every numeric operator, regex reaches the planner in the form a
// trigram index serves, and the answers stay the same with and without the indexes.
import type { EntityManager } from '@mikro-orm/postgresql';
import { afterAll, describe, expect, it } from 'vitest';
import { initOrm } from '../../../shared/platform/db/orm.ts';
import {
  dropPersonPropertyIndexes,
  indexPersonProperty,
  personPropertyIndexes,
} from '../../../shared/persons/property-indexes.ts';
import { sql } from '../../db.ts';
import { apiWithAccount, call, createAccount, ownDatabase } from '../../helpers.ts';
import { listPlan } from './list-plan.ts';

const { api, account } = await apiWithAccount();
// A key of this file's own: the indexes are on the whole person table.
const KEY = `score-${account.projectId}`;
const em = () => api.orm.em.fork() as EntityManager;

await sql(
  api.orm,
  `insert into person (uuid, project_id, properties)
   select gen_random_uuid(), ?, jsonb_build_object(?::text, case when g % 10 = 0 then to_jsonb('n/a'::text) else to_jsonb(g) end,
                                                   'label', 'item ' || g)
     from generate_series(1, 300) g`,
  [account.projectId, KEY],
);
await sql(api.orm, 'analyze person');
afterAll(() => dropPersonPropertyIndexes(em(), KEY));

const planOf = (filter: unknown[]) => listPlan(em(), account.projectId, filter);

/** The indexes that plan reads. */
const indexesRead = async (filter: unknown[]) =>
  [
    ...(await planOf(filter)).matchAll(
      /(?:Index Scan (?:Backward )?using|Index Only Scan (?:Backward )?using|Bitmap Index Scan on) (\S+)/g,
    ),
  ].map((m) => m[1]);

/** How many persons of the project the filter matches (the list's exact count). */
async function matches(filter: unknown[]): Promise<number> {
  const q = encodeURIComponent(JSON.stringify(filter));
  const res = await call(api.baseUrl, 'GET', `/api/projects/${account.projectId}/persons/?limit=1000&properties=${q}`, {
    key: account.apiKey,
  });
  expect(res.status, res.text).toBe(200);
  return res.body.count;
}

const numeric = [
  [{ key: KEY, value: 295, operator: 'gt' }],
  [{ key: KEY, value: 295, operator: 'gte' }],
  [{ key: KEY, value: 5, operator: 'lt' }],
  [{ key: KEY, value: 5, operator: 'lte' }],
  [{ key: KEY, value: [100, 104], operator: 'between' }],
  [{ key: KEY, value: 100000, operator: 'gt' }], // matches nobody
];
const substring = [{ key: KEY, value: 'N/A', operator: 'icontains' }]; // three characters: a trigram

describe('property indexes', () => {
  it('serve every numeric comparison on the property, and leave the answers as they were', async () => {
    const before = await Promise.all([...numeric, substring].map(matches));
    expect(before).toEqual([4, 5, 4, 5, 4, 0, 30]);

    const made = await indexPersonProperty(em(), KEY, ['number', 'text']);
    expect(made.map(({ kind, key, valid }) => ({ kind, key, valid }))).toEqual([
      { kind: 'number', key: KEY, valid: true },
      { kind: 'text', key: KEY, valid: true },
    ]);
    const [number, text] = made.map((index) => index.name);
    await sql(api.orm, 'analyze person');
    for (const filter of numeric) expect(await indexesRead(filter), JSON.stringify(filter)).toContain(number);
    // The trigram index: on 300 persons walking the project's newest-first index is cheaper, so its use is
    // shown at volume (bench/persons.ts prints the plan), not here.
    expect(text).toMatch(/^person_property_text_/);
    expect(await Promise.all([...numeric, substring].map(matches))).toEqual(before);
  });

  it('build when PostgreSQL builds them with parallel workers', async () => {
    // A database of its own, whose person table asks for parallel index builds whatever its size.
    const orm = await initOrm(await ownDatabase('parallel_index_build'), 2);
    try {
      const own = await createAccount(orm);
      await sql(orm, 'alter table person set (parallel_workers = 2)');
      await sql(
        orm,
        `insert into person (uuid, project_id, properties)
         select gen_random_uuid(), ?, jsonb_build_object('n', g, 't', 'x' || g,
                                                         'd', case when g % 5 = 0 then 'soon' else '2024-03-05T10:00:00Z' end)
           from generate_series(1, 2000) g`,
        [own.projectId],
      );
      const fork = orm.em.fork() as EntityManager;
      const built = [
        ...(await indexPersonProperty(fork, 'n', ['number'])),
        ...(await indexPersonProperty(fork, 't', ['text'])),
        ...(await indexPersonProperty(fork, 'd', ['date'])),
      ];
      expect(built.map(({ kind, valid }) => ({ kind, valid }))).toEqual([
        { kind: 'number', valid: true },
        { kind: 'text', valid: true },
        { kind: 'date', valid: true },
        { kind: 'date', valid: true },
      ]);
    } finally {
      await orm.close();
    }
  });

  it('regex reaches the planner as a plain `~` (what a trigram index serves), an invalid pattern as false', async () => {
    const valid = await planOf([{ key: 'label', value: '^item 1', operator: 'regex' }]);
    expect(valid).toContain("~ '^item 1'::text");
    expect(valid).not.toContain('regex_matches');
    expect(await planOf([{ key: 'label', value: '([', operator: 'regex' }])).toContain('One-Time Filter: false');
    expect(await matches([{ key: 'label', value: '^item 1[0-9]$', operator: 'regex' }])).toBe(10);
    expect(await matches([{ key: 'label', value: '([', operator: 'regex' }])).toBe(0);
  });

  it('leave out of the listing an index of the same name pattern that they did not make', async () => {
    const name = `person_property_by_hand_${account.projectId}`;
    await sql(api.orm, `create index ${name} on person (project_id) where project_id = ${account.projectId}`);
    try {
      await sql(api.orm, `comment on index ${name} is 'made by hand'`);
      expect((await personPropertyIndexes(em())).map((index) => index.name)).not.toContain(name);
    } finally {
      await sql(api.orm, `drop index ${name}`);
    }
  });

  it('are listed with their key, made again idempotently, and dropped', async () => {
    const again = await indexPersonProperty(em(), KEY, ['number']);
    expect(again.map((index) => index.kind)).toEqual(['number', 'text']);
    expect((await personPropertyIndexes(em())).filter((index) => index.key === KEY)).toHaveLength(2);
    expect(await dropPersonPropertyIndexes(em(), KEY)).toHaveLength(2);
    expect((await personPropertyIndexes(em())).filter((index) => index.key === KEY)).toEqual([]);
  });
});
