// Pages of a list and their count (shared/platform/db/paged.ts): pagedSelect pages a typed query, read one row past
// the page, and counts its matches exactly or, past `exactUpTo`, with the planner's estimate (never below
// the rows known to exist).
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MikroORM } from '@mikro-orm/postgresql';
import { initOrm } from '../../../shared/platform/db/orm.ts';
import { db } from '../../../shared/platform/db/kysely.ts';
import { pagedSelect } from '../../../shared/platform/db/paged.ts';

let orm: MikroORM;
const projectId = 2_000_000_000 - Math.floor(Math.random() * 1_000_000);

beforeAll(async () => {
  orm = await initOrm(process.env.DATABASE_URL!);
  await db(orm.em.fork())
    .insertInto('activity_log')
    .values(
      Array.from({ length: 7 }, (_, i) => ({
        id: randomUUID(),
        project_id: projectId,
        scope: 'PagedTest',
        item_id: String(i),
        activity: 'created',
        detail: { n: i },
      })),
    )
    .execute();
});
afterAll(async () => {
  await db(orm.em.fork()).deleteFrom('activity_log').where('project_id', '=', projectId).execute();
  await orm.close();
});

const typed = () =>
  db(orm.em.fork())
    .selectFrom('activity_log as a')
    .select(['a.item_id', 'a.detail'])
    .where('a.project_id', '=', projectId)
    .orderBy('a.item_id');

describe('pagedSelect', () => {
  it.each([
    [{ limit: 3, offset: 0 }, undefined],
    [{ limit: 3, offset: 3 }, undefined],
    [{ limit: 3, offset: 6 }, undefined],
    [{ limit: 3, offset: 9 }, undefined],
    [{ limit: 2, offset: 2 }, 100],
    [{ limit: 2, offset: 2 }, 3],
  ])('pages and counts %j (exactUpTo %s)', async (page, exactUpTo) => {
    const fromTyped = await pagedSelect(orm.em.fork(), typed(), page, { exactUpTo });
    const known = Math.min(7, page.offset + page.limit + 1);
    expect(fromTyped.hasMore).toBe(page.offset + page.limit < 7);
    if (fromTyped.estimated) expect(fromTyped.count).toBeGreaterThanOrEqual(known);
    else expect(fromTyped.count).toBe(7);
    if (exactUpTo !== undefined && exactUpTo < 7) expect(fromTyped.estimated).toBe(true);
    expect(fromTyped.rows.map((r) => r.item_id)).toEqual(
      ['0', '1', '2', '3', '4', '5', '6'].slice(page.offset, page.offset + page.limit),
    );
    if (exactUpTo === undefined || exactUpTo >= 7) expect(fromTyped).toMatchObject({ count: 7, estimated: false });
    // read wraps the limited query: it sees the page and the one row past it.
    const wrapped = await pagedSelect(orm.em.fork(), typed(), page, {
      exactUpTo,
      read: async (pageQuery) => (await pageQuery.execute()).map((r) => r.item_id),
    });
    expect(wrapped.rows).toEqual(fromTyped.rows.map((r) => r.item_id));
    expect(wrapped.count).toBe(fromTyped.count);
    expect(fromTyped.rows[0]?.detail ?? null).toEqual(fromTyped.rows.length ? { n: page.offset } : null);
  });
});
