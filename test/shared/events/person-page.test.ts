// personIdPageOf: a page of persons given all their ids (what the ClickHouse store answers with). The
// walk over the project's persons newest first, in steps of any size, gives the same count and page
// as the lookup of the ids themselves: dense and sparse sets, persons sharing a created_at (the walk's
// keyset continues inside a tie), ids of another project or of no person, pages past the end.
import type { EntityManager, MikroORM } from '@mikro-orm/postgresql';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../../shared/platform/config.ts';
import { initOrm } from '../../../shared/platform/db/orm.ts';
import { rows } from '../../../shared/platform/db/sql.ts';
import { personIdPageOf } from '../../../shared/events/analytics.ts';
import { createAccount } from '../../helpers.ts';

let orm: MikroORM;
let projectId: number;
let otherIds: string[];
let ids: string[];
const em = () => orm.em.fork() as EntityManager;

/** `n` persons of a project, created in groups of three sharing one created_at. */
async function persons(project: number, n: number): Promise<string[]> {
  const found = await rows<{ id: string }>(
    em(),
    `insert into person (uuid, project_id, created_at)
     select gen_random_uuid(), ?, timestamptz '2026-01-01 00:00:00.123456+00' + (i / 3) * interval '1 minute'
       from generate_series(0, ? - 1) i returning id::text as id`,
    [project, n],
  );
  return found.map((r) => r.id);
}

beforeAll(async () => {
  orm = await initOrm(loadConfig().databaseUrl);
  projectId = (await createAccount(orm)).projectId;
  const other = (await createAccount(orm)).projectId;
  ids = await persons(projectId, 60);
  otherIds = await persons(other, 10);
});

afterAll(async () => {
  await orm.close();
});

describe('personIdPageOf', () => {
  it('walks the persons in steps of any size to the same count and page as the ids lookup', async () => {
    const sets: Record<string, string[]> = {
      all: ids,
      dense: ids.filter((_, i) => i % 5 !== 2),
      'every third': ids.filter((_, i) => i % 3 === 1),
      sparse: [ids[4], ids[41]],
      'with strangers': [...ids.filter((_, i) => i % 2 === 0), ...otherIds, '999999999999'],
      'only strangers': [...otherIds],
    };
    const pages = [
      { limit: 100, offset: 0 },
      { limit: 5, offset: 0 },
      { limit: 7, offset: 11 },
      { limit: 10, offset: 55 },
      { limit: 3, offset: 200 },
    ];
    let compared = 0;
    for (const [name, set] of Object.entries(sets))
      for (const page of pages) {
        const expected = await personIdPageOf(em(), projectId, set, page, 0);
        for (const walkChunk of [1, 2, 4, 1000]) {
          const got = await personIdPageOf(em(), projectId, set, page, walkChunk);
          expect(got, `${name} ${JSON.stringify(page)} in steps of ${walkChunk}`).toEqual(expected);
          compared++;
        }
      }
    expect(compared).toBe(6 * 5 * 4);
    // The reference itself: newest first, ties by id descending, other projects' ids left out.
    const newestFirst = [...ids].sort(
      (a, b) => Math.floor(ids.indexOf(b) / 3) - Math.floor(ids.indexOf(a) / 3) || Number(b) - Number(a),
    );
    expect(await personIdPageOf(em(), projectId, [...ids, ...otherIds], { limit: 100, offset: 0 }, 0)).toEqual({
      count: 70,
      personIds: newestFirst,
    });
  });
});
