// X-Request-Id: a client's own id is kept (and logged) when it is a short token, replaced otherwise.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, startApi, type TestApi } from '../../helpers.ts';

let api: TestApi;
beforeAll(async () => {
  api = await startApi();
});
afterAll(() => api.close());

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const answeredId = async (sent?: string) =>
  (
    await call(api.baseUrl, 'GET', '/_health', { headers: sent === undefined ? {} : { 'x-request-id': sent } })
  ).headers.get('x-request-id');

describe('request id', () => {
  it("keeps a client's id of up to 200 visible characters", async () => {
    expect(await answeredId('trace-1234:abc/DEF')).toBe('trace-1234:abc/DEF');
    expect(await answeredId('x'.repeat(200))).toBe('x'.repeat(200));
  });

  it('replaces a longer id, or one with spaces or non-ASCII, by a fresh one', async () => {
    for (const sent of ['x'.repeat(201), 'a'.repeat(5000), 'two words', 'caf\u00e9']) {
      const answered = await answeredId(sent);
      expect(answered, sent.slice(0, 20)).toMatch(UUID);
    }
    expect(await answeredId()).toMatch(UUID);
  });
});
