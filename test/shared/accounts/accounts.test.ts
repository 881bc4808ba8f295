import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHash } from 'node:crypto';
import { call, createAccount, startApi, type TestApi } from '../../helpers.ts';

let api: TestApi;
beforeAll(async () => {
  api = await startApi();
});
afterAll(() => api.close());

describe('personal API key storage', () => {
  it('stores only sha256$<hex> of the key, never the key itself', async () => {
    const account = await createAccount(api.orm);
    const rows = await api.orm.em
      .fork()
      .getConnection()
      .execute<any[]>(`select k.* from personal_api_key k where k.user_id = ?`, [account.userId]);
    expect(rows).toHaveLength(1);
    const expected = `sha256$${createHash('sha256').update(account.apiKey).digest('hex')}`;
    expect(rows[0].secure_value).toBe(expected);
    expect(rows[0].mask_value).toBe(`phx_...${account.apiKey.slice(-4)}`);
    for (const value of Object.values(rows[0])) expect(JSON.stringify(value) ?? '').not.toContain(account.apiKey);
    const res = await call(api.baseUrl, 'GET', `/api/projects/${account.projectId}/`, { key: account.apiKey });
    expect(res.status).toBe(200);
  });
});
