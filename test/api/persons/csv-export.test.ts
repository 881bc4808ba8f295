// The whole-project CSV export: keyset-paged (order of the list, (created_at, id) as the key), so it
// returns every person exactly once in the list's order however many there are, with no silent cap,
// and persons created while it runs do not shift later pages into duplicates.
import { describe, expect, it } from 'vitest';
import type { EntityManager } from '@mikro-orm/postgresql';
import { personsCsv } from '../../../api/persons/csv.ts';
import { personListFilter } from '../../../shared/persons/store.ts';
import { sql } from '../../db.ts';
import { apiWithAccount } from '../../helpers.ts';

const { api, account } = await apiWithAccount();
const em = () => api.orm.em.fork() as EntityManager;

// 11 persons; three share one created_at (the id breaks the tie) and two differ by a microsecond.
await sql(
  api.orm,
  `insert into person (uuid, project_id, properties, created_at)
   select gen_random_uuid(), ?, jsonb_build_object('email', 'p' || g || '@example.com'),
          case when g between 4 and 6 then '2024-01-01T00:00:00Z'::timestamptz
               when g = 7 then '2023-06-01T00:00:00.000001Z'::timestamptz
               when g = 8 then '2023-06-01T00:00:00.000002Z'::timestamptz
               else '2020-01-01'::timestamptz + make_interval(days => g) end
     from generate_series(1, 11) g`,
  [account.projectId],
);
const expected = (
  await sql<{ email: string }>(
    api.orm,
    `select properties->>'email' as email from person where project_id = ? order by created_at desc, id desc`,
    [account.projectId],
  )
).map((r) => r.email);

/** The export's email column, read chunk by chunk; `between` runs after the first data chunk. */
async function exportEmails(options: { pageSize: number; limit?: number }, between?: () => Promise<void>) {
  const filter = await personListFilter(em(), account.projectId, {});
  const { stream } = await personsCsv(em(), filter, options);
  let text = '';
  let chunks = 0;
  for await (const chunk of stream) {
    text += chunk;
    if (++chunks === 2 && between) await between();
  }
  const [header, ...lines] = text.trim().split('\r\n');
  const column = header.split(',').indexOf('properties.email');
  return lines.map((line) => line.split(',')[column]);
}

describe('CSV export paging', () => {
  it('returns every person exactly once in the list order, across many small pages', async () => {
    expect(await exportEmails({ pageSize: 2 })).toEqual(expected);
    expect(await exportEmails({ pageSize: 3 })).toEqual(expected);
    expect(await exportEmails({ pageSize: 1000 })).toEqual(expected);
  });

  it('stops at `limit` when one is given, in the same order', async () => {
    expect(await exportEmails({ pageSize: 2, limit: 5 })).toEqual(expected.slice(0, 5));
  });

  it('says up front how many rows it will write (X-Total-Count), all of them or `limit`', async () => {
    for (const [query, rows] of [
      ['', expected.length],
      ['&limit=5', 5],
      [`&properties=${encodeURIComponent(JSON.stringify([{ key: 'email', value: 'p3@example.com' }]))}`, 1],
    ] as const) {
      const res = await fetch(`${api.baseUrl}/api/projects/${account.projectId}/persons/?format=csv${query}`, {
        headers: { authorization: `Bearer ${account.apiKey}` },
      });
      expect(res.status).toBe(200);
      expect(res.headers.get('x-total-count')).toBe(String(rows));
      const lines = (await res.text()).trim().split('\r\n');
      expect(lines.length - 1).toBe(rows);
    }
  });

  it('does not repeat rows when persons are created during the export', async () => {
    const emails = await exportEmails({ pageSize: 2 }, async () => {
      await sql(
        api.orm,
        `insert into person (uuid, project_id, properties)
         select gen_random_uuid(), ?, jsonb_build_object('email', 'new' || g || '@example.com') from generate_series(1, 5) g`,
        [account.projectId],
      );
    });
    expect(emails).toEqual(expected);
    expect(new Set(emails).size).toBe(emails.length);
  });
});
