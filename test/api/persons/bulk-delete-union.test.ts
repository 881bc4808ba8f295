// Seed rule 1: bulk_delete removes every person named by `ids` and every person owning a
// distinct id named by `distinct_ids`, each list at most 1000 entries.
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { sql } from '../../db.ts';
import { capture } from '../../fixtures.ts';
import { apiWithAccount, call } from '../../helpers.ts';

const { api, account } = await apiWithAccount();
const P = () => `/api/projects/${account.projectId}/persons`;
const bulkDelete = (body: unknown, query = '') =>
  call(api.baseUrl, 'POST', `${P()}/bulk_delete/${query}`, { key: account.apiKey, body });

async function newPerson(distinctId: string) {
  await capture(api.baseUrl, account.projectToken, [{ event: 'seed', distinct_id: distinctId }]);
  const res = await call(api.baseUrl, 'GET', `${P()}/?distinct_id=${distinctId}`, { key: account.apiKey });
  return res.body.results[0] as { uuid: string };
}
const remaining = async (uuids: string[]) =>
  (
    await sql(api.orm, `select uuid::text from person where project_id = ? and uuid = any(?::uuid[]) order by uuid`, [
      account.projectId,
      `{${uuids.join(',')}}`,
    ])
  ).map((r) => r.uuid);

describe('bulk_delete with both ids and distinct_ids', () => {
  it('removes the union, a person named both ways counted once', async () => {
    const [a, b, c, d, kept] = await Promise.all(['u1', 'u2', 'u3', 'u4', 'u5'].map(newPerson));
    const body = { ids: [a.uuid, b.uuid], distinct_ids: ['u2', 'u3', 'u4', 'nobody'], delete_events: true };
    const res = await bulkDelete(body);
    expect(res.status, res.text).toBe(200);
    expect(res.body).toMatchObject({ persons_found: 4, persons_deleted: 4, events_queued_for_deletion: true });
    const requested = res.body.deletion_requests.map((r: any) => r.person_uuid).sort();
    expect(requested).toEqual([a, b, c, d].map((p) => p.uuid).sort());
    expect(await remaining([a, b, c, d, kept].map((p) => p.uuid))).toEqual([kept.uuid]);
  });

  it('takes both lists from the query too', async () => {
    const [a, b] = await Promise.all(['q1', 'q2'].map(newPerson));
    const res = await bulkDelete(undefined, `?ids=${a.uuid}&distinct_ids=q2`);
    expect(res.status, res.text).toBe(200);
    expect(res.body.persons_deleted).toBe(2);
    expect(await remaining([a.uuid, b.uuid])).toEqual([]);
  });

  it('still holds each list to 1000 entries, so 1000 + 1000 is allowed and 1001 of either is not', async () => {
    const many = (prefix: string, n: number) => Array.from({ length: n }, (_, i) => `${prefix}${i}`);
    const uuids = Array.from({ length: 1000 }, () => randomUUID());
    const both = await bulkDelete({ ids: uuids, distinct_ids: many('x', 1000) });
    expect(both.status, both.text).toBe(200);
    expect(both.body.persons_found).toBe(0);
    const tooManyIds = await bulkDelete({ ids: many('', 1001), distinct_ids: ['x'] });
    expect(tooManyIds.status).toBe(400);
    expect(tooManyIds.body.detail).toBe('You can only pass 1000 ids in one call');
    const tooManyDistinct = await bulkDelete({ ids: ['1'], distinct_ids: many('x', 1001) });
    expect(tooManyDistinct.status).toBe(400);
    expect(tooManyDistinct.body.detail).toBe('You can only pass 1000 distinct_ids in one call');
  });
});
