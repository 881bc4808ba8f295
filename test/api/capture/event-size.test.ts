// One event over PostHog's per-event limit (its capture's Kafka message.max.bytes, 1 000 000 bytes) is
// never stored silently: PostHog's capture answers 413 and leaves a message_size_too_large ingestion
// warning; so do we, and (a failure stores nothing here) the rest of that request is not stored either.
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { sql } from '../../db.ts';
import { apiWithAccount } from '../../helpers.ts';

const { api, account } = await apiWithAccount();

async function post(path: string, body: unknown) {
  const res = await fetch(`${api.baseUrl}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: res.status, body: await res.json() };
}
const stored = (event: string) =>
  sql(api.orm, `select uuid from event where project_id = ? and event = ?`, [account.projectId, event]);
const warningsFor = (uuid: string) =>
  sql(api.orm, `select type, distinct_id, details from ingestion_warning where project_id = ? and event_uuid = ?`, [
    account.projectId,
    uuid,
  ]);
/** An event of about `bytes` bytes of JSON. */
const sized = (event: string, bytes: number, uuid = randomUUID()) => ({
  event,
  uuid,
  distinct_id: 'size-user',
  properties: { blob: 'x'.repeat(bytes) },
});

describe('an event over PostHog’s 1 000 000-byte limit', () => {
  it('in a batch: 413, a message_size_too_large warning naming it, and nothing of the request stored', async () => {
    const big = randomUUID();
    const res = await post('/batch/', {
      api_key: account.projectToken,
      batch: [sized('size-ok-before', 100), sized('size-too-big', 1_100_000, big), sized('size-ok-after', 100)],
    });
    expect(res.status).toBe(413);
    expect(res.body).toMatchObject({ type: 'invalid_request', code: 'event_too_big', attr: null });
    expect(res.body.detail).toMatch(/1000000 bytes/);
    expect(await stored('size-too-big')).toEqual([]);
    expect(await stored('size-ok-before')).toEqual([]);
    expect(await stored('size-ok-after')).toEqual([]);
    const warnings = await warningsFor(big);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatchObject({
      type: 'message_size_too_large',
      distinct_id: 'size-user',
      details: { eventName: 'size-too-big', limitBytes: 1_000_000 },
    });
    expect(warnings[0].details.bytes).toBeGreaterThan(1_100_000);
  });

  it('alone on /e: 413 and the warning', async () => {
    const big = randomUUID();
    const res = await post('/e/', { ...sized('size-single-too-big', 1_050_000, big), api_key: account.projectToken });
    expect(res.status).toBe(413);
    expect(await stored('size-single-too-big')).toEqual([]);
    expect((await warningsFor(big)).map((w) => w.type)).toEqual(['message_size_too_large']);
  });

  it('an event just under the limit is stored, without a warning', async () => {
    const uuid = randomUUID();
    const res = await post('/batch/', { api_key: account.projectToken, batch: [sized('size-under', 990_000, uuid)] });
    expect(res).toEqual({ status: 200, body: { status: 1 } });
    expect(await stored('size-under')).toHaveLength(1);
    expect(await warningsFor(uuid)).toEqual([]);
  });
});
