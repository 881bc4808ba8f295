// Path ids are checked by their routes' schemas, by the one id rule (shared/platform/ids.ts): an id the
// schema refuses names nothing (PostHog's 404), after authentication as any other answer.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, createAccount, startApi, type TestAccount, type TestApi } from '../../helpers.ts';

let api: TestApi;
let account: TestAccount;
beforeAll(async () => {
  api = await startApi();
  account = await createAccount(api.orm);
});
afterAll(() => api.close());

describe('path ids', () => {
  const P = () => `/api/projects/${account.projectId}`;
  it.each([
    ['POST', 'persons/deletion_status/x1/cancel/'],
    ['POST', 'persons/deletion_status/1234567890123456789/cancel/'],
    ['POST', 'persons/deletion_status/12/retry/'],
    ['GET', 'persons/deletion_receipts/1e3/'],
    ['GET', 'experiments/1234567890/'],
    ['GET', 'experiments/abc/'],
    ['GET', 'webhooks/-1/'],
  ])('%s %s: 404 with PostHog body; 401 without a key', async (method, path) => {
    const res = await call(api.baseUrl, method, `${P()}/${path}`, { key: account.apiKey });
    expect(res.status, res.text).toBe(404);
    expect(res.body).toMatchObject({ type: 'invalid_request', code: 'not_found' });
    expect((await call(api.baseUrl, method, `${P()}/${path}`)).status).toBe(401);
  });
});
