import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listPersonAccess, recordPersonAccess } from '../../../shared/access-log/index.ts';
import { createAccount, startApi, type TestApi } from '../../helpers.ts';

let api: TestApi;
beforeAll(async () => {
  api = await startApi();
});
afterAll(() => api.close());

describe('the read-access log store', () => {
  it('lists a person’s reads newest first, and only theirs', async () => {
    const account = await createAccount(api.orm);
    const [a, b] = [randomUUID(), randomUUID()];
    const em = api.orm.em.fork();
    const base = {
      projectId: account.projectId,
      userId: account.userId,
      apiKeyId: null,
      requestId: 'r1',
      clientAddress: '10.0.0.1',
    };
    await recordPersonAccess(em, { ...base, action: 'person_list', personUuids: [a, b] });
    await recordPersonAccess(em, { ...base, action: 'person_retrieve', personUuids: [a] });
    await recordPersonAccess(em, { ...base, action: 'person_list', personUuids: [] });
    const ofA = await listPersonAccess(em, { projectId: account.projectId, personUuid: a, limit: 10, offset: 0 });
    expect(ofA.map((r) => r.action)).toEqual(['person_retrieve', 'person_list']);
    const ofB = await listPersonAccess(em, { projectId: account.projectId, personUuid: b, limit: 10, offset: 0 });
    expect(ofB.map((r) => r.action)).toEqual(['person_list']);
    expect(ofB[0]).toMatchObject({ user_id: account.userId, client_address: '10.0.0.1', request_id: 'r1' });
    const all = await listPersonAccess(em, { projectId: account.projectId, limit: 10, offset: 0 });
    expect(all).toHaveLength(2);
  });
});
