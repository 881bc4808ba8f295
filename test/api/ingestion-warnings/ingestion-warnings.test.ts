// Capture answers 200 for a request it accepted; each event of it that was dropped or stored altered
// leaves an ingestion warning, listed per type as PostHog's /ingestion_warnings/ lists them.
import { randomUUID } from 'node:crypto';
import { PostHog } from 'posthog-node';
import { describe, expect, it } from 'vitest';
import { sql } from '../../db.ts';
import { apiWithAccount, call, createAccount, createKey } from '../../helpers.ts';

const { api, account } = await apiWithAccount();

async function sendBatch(body: string, token = account.projectToken) {
  const res = await fetch(`${api.baseUrl}/batch/`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: body.replace('TOKEN', token),
  });
  return { status: res.status, body: await res.json() };
}

const warningsOf = async (query = '', key = account.apiKey, projectId = account.projectId) =>
  call(api.baseUrl, 'GET', `/api/projects/${projectId}/ingestion_warnings/${query}`, { key });

const summaryOf = (body: any, type: string) => body.results.find((s: any) => s.type === type);
const eventCount = async (uuid: string) =>
  (
    await sql(api.orm, `select count(*)::int as n from event where project_id = ? and uuid = ?`, [
      account.projectId,
      uuid,
    ])
  )[0].n;

const deep = (levels: number) => `${'{"a":'.repeat(levels)}1${'}'.repeat(levels)}`;

describe('capture records a warning for each event it drops or alters', () => {
  it('a deep-nested event and bad timestamps sent to /batch/: 200, the warnings name the event and distinct id', async () => {
    const deepUuid = randomUUID();
    const pastUuid = randomUUID();
    const futureUuid = randomUUID();
    const garbledUuid = randomUUID();
    const goodUuid = randomUUID();
    const body =
      `{"api_key":"TOKEN","batch":[` +
      `{"event":"fine","distinct_id":"batch-user","uuid":"${goodUuid}"},` +
      `{"event":"too deep","distinct_id":"deep-user","uuid":"${deepUuid}","properties":${deep(300)}},` +
      `{"event":"year zero","distinct_id":"past-user","uuid":"${pastUuid}","timestamp":"0000-06-01T00:00:00Z"},` +
      `{"event":"far ahead","distinct_id":"future-user","uuid":"${futureUuid}","timestamp":"+010000-01-01T00:00:00Z"},` +
      `{"event":"garbled","distinct_id":"garbled-user","uuid":"${garbledUuid}","timestamp":"yesterday-ish"}]}`;
    expect(await sendBatch(body)).toEqual({ status: 200, body: { status: 1 } });
    expect(await eventCount(deepUuid)).toBe(0);
    expect(await eventCount(futureUuid)).toBe(1);

    const res = await warningsOf();
    expect(res.status).toBe(200);
    const tooDeep = summaryOf(res.body, 'event_dropped_too_deep');
    expect(tooDeep).toMatchObject({ type: 'event_dropped_too_deep', count: 1 });
    expect(tooDeep.warnings).toEqual([
      {
        type: 'event_dropped_too_deep',
        timestamp: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
        details: expect.objectContaining({ eventUuid: deepUuid, distinctId: 'deep-user', eventName: 'too deep' }),
      },
    ]);
    expect(tooDeep.lastSeen).toBe(tooDeep.warnings[0].timestamp);
    expect(tooDeep.sparkline).toEqual([[1, new Date().toISOString().slice(0, 10)]]);

    const invalid = summaryOf(res.body, 'ignored_invalid_timestamp');
    expect(invalid.count).toBe(2);
    expect(invalid.warnings.map((w: any) => [w.details.eventUuid, w.details.distinctId]).sort()).toEqual(
      [
        [pastUuid, 'past-user'],
        [garbledUuid, 'garbled-user'],
      ].sort(),
    );
    expect(invalid.warnings.find((w: any) => w.details.eventUuid === pastUuid).details).toMatchObject({
      timestamp: '0000-06-01T00:00:00Z',
      result: '1970-01-01T00:00:00.000Z',
    });
    expect(invalid.warnings.find((w: any) => w.details.eventUuid === garbledUuid).details).toMatchObject({
      field: 'timestamp',
      value: 'yesterday-ish',
    });
    expect(summaryOf(res.body, 'event_timestamp_in_future').warnings[0].details).toMatchObject({
      eventUuid: futureUuid,
      distinctId: 'future-user',
      timestamp: '+010000-01-01T00:00:00Z',
    });
    // The event stored as sent has none.
    expect(JSON.stringify(res.body)).not.toContain(goodUuid);
  });

  it('a request whose only event is dropped still answers 200 and records it', async () => {
    const uuid = randomUUID();
    const body = `{"api_key":"TOKEN","batch":[{"event":"alone","distinct_id":"lonely","uuid":"${uuid}","$set":${deep(200)}}]}`;
    expect(await sendBatch(body)).toEqual({ status: 200, body: { status: 1 } });
    const res = await warningsOf(`?q=${uuid}`);
    expect(res.body.results).toHaveLength(1);
    expect(res.body.results[0]).toMatchObject({ type: 'event_dropped_too_deep', count: 1 });
    expect(res.body.results[0].warnings[0].details).toMatchObject({ eventUuid: uuid, distinctId: 'lonely' });
  });

  it('posthog-node (gzip) sending a deep event and a far-future timestamp: warnings with the SDK’s uuids', async () => {
    const posthog = new PostHog(account.projectToken, {
      host: api.baseUrl,
      flushAt: 10,
      flushInterval: 0,
      fetchRetryCount: 0,
    });
    const deepUuid = randomUUID();
    const futureUuid = randomUUID();
    let properties: Record<string, unknown> = { leaf: true };
    for (let i = 0; i < 150; i++) properties = { nested: properties };
    posthog.capture({ distinctId: 'node-user', event: 'node deep', properties, uuid: deepUuid });
    posthog.capture({
      distinctId: 'node-user',
      event: 'node future',
      timestamp: new Date(Date.now() + 3 * 24 * 3600 * 1000),
      uuid: futureUuid,
    });
    await posthog.shutdown();
    expect(await eventCount(futureUuid)).toBe(1);
    expect(await eventCount(deepUuid)).toBe(0);

    const res = await warningsOf('?q=node-user');
    expect(res.status).toBe(200);
    expect(summaryOf(res.body, 'event_dropped_too_deep').warnings[0].details).toMatchObject({
      eventUuid: deepUuid,
      distinctId: 'node-user',
    });
    expect(summaryOf(res.body, 'event_timestamp_in_future').warnings[0].details).toMatchObject({
      eventUuid: futureUuid,
      distinctId: 'node-user',
    });
  });

  it('NUL and lone surrogates replaced, a long name cut, and merges refused are warned about too', async () => {
    const tag = randomUUID().slice(0, 8);
    // Two identified persons: the second alias is refused (PostHog's cannot_merge_already_identified).
    const setup = [
      { event: '$identify', distinct_id: `a-${tag}`, properties: { $anon_distinct_id: `anon-a-${tag}` } },
      { event: '$identify', distinct_id: `b-${tag}`, properties: { $anon_distinct_id: `anon-b-${tag}` } },
    ];
    const refusedUuid = randomUUID();
    const illegalUuid = randomUUID();
    const unicodeUuid = randomUUID();
    const longUuid = randomUUID();
    const events = [
      ...setup,
      { event: '$create_alias', distinct_id: `a-${tag}`, uuid: refusedUuid, properties: { alias: `b-${tag}` } },
      { event: '$identify', distinct_id: `a-${tag}`, uuid: illegalUuid, properties: { $anon_distinct_id: 'null' } },
      { event: 'nul\u0000', distinct_id: `u-${tag}`, uuid: unicodeUuid, properties: { v: 'x\ud800' } },
      { event: 'n'.repeat(500), distinct_id: `l-${tag}`, uuid: longUuid },
    ];
    const body = JSON.stringify({ api_key: 'TOKEN', batch: events });
    expect(await sendBatch(body)).toEqual({ status: 200, body: { status: 1 } });
    const res = await warningsOf(`?q=${tag}`);
    const detailsOf = (type: string) => summaryOf(res.body, type)?.warnings.map((w: any) => w.details);
    expect(detailsOf('cannot_merge_already_identified')).toEqual([
      expect.objectContaining({
        eventUuid: refusedUuid,
        distinctId: `a-${tag}`,
        sourcePersonDistinctId: `b-${tag}`,
        targetPersonDistinctId: `a-${tag}`,
      }),
    ]);
    expect(detailsOf('cannot_merge_with_illegal_distinct_id')).toEqual([
      expect.objectContaining({ eventUuid: illegalUuid, illegalDistinctId: 'null', otherDistinctId: `a-${tag}` }),
    ]);
    expect(detailsOf('invalid_unicode_replaced')).toEqual([
      expect.objectContaining({ eventUuid: unicodeUuid, distinctId: `u-${tag}`, strings: 2 }),
    ]);
    expect(detailsOf('event_field_truncated')).toEqual([
      expect.objectContaining({ eventUuid: longUuid, distinctId: `l-${tag}`, fields: ['event'] }),
    ]);
  });

  it('a recording snapshot without $session_id (not stored) and a $performance_event (dropped) are warned about', async () => {
    const snapshotUuid = randomUUID();
    const performanceUuid = randomUUID();
    const withSession = randomUUID();
    const body = JSON.stringify({
      api_key: 'TOKEN',
      batch: [
        { event: '$snapshot', distinct_id: 'rec-user', uuid: snapshotUuid, properties: { $snapshot_data: [] } },
        {
          event: '$snapshot',
          distinct_id: 'rec-user',
          uuid: withSession,
          properties: { $session_id: `s-${withSession}`, $snapshot_data: [] },
        },
        { event: '$performance_event', distinct_id: 'rec-user', uuid: performanceUuid },
      ],
    });
    expect(await sendBatch(body)).toEqual({ status: 200, body: { status: 1 } });
    const res = await warningsOf('?q=rec-user');
    expect(summaryOf(res.body, 'snapshot_dropped_no_session_id').warnings.map((w: any) => w.details.eventUuid)).toEqual(
      [snapshotUuid],
    );
    expect(summaryOf(res.body, 'event_dropped_performance_event').warnings[0].details).toMatchObject({
      eventUuid: performanceUuid,
      distinctId: 'rec-user',
    });
  });
});

describe('what a warning shows of the client’s values', () => {
  it('NUL and lone surrogates in a dropped event’s distinct id, name or an unreadable sent_at are stored repaired (200, not 500)', async () => {
    const uuid = randomUUID();
    const other = randomUUID();
    const body =
      `{"api_key":"TOKEN","sent_at":"bad\\u0000\\ud800","batch":[` +
      `{"event":"deep\\u0000","distinct_id":"nul\\u0000user\\udc00","uuid":"${uuid}","properties":${deep(200)}},` +
      `{"event":"$performance_event","distinct_id":"perf\\u0000","uuid":"${other}"},` +
      `{"event":"skewed","distinct_id":"nul-sent-at","timestamp":"2026-01-01T00:00:00Z"}]}`;
    expect(await sendBatch(body)).toEqual({ status: 200, body: { status: 1 } });
    const res = await warningsOf('?q=nul');
    expect(summaryOf(res.body, 'event_dropped_too_deep').warnings[0].details).toMatchObject({
      eventUuid: uuid,
      distinctId: 'nul\ufffduser\ufffd',
      eventName: 'deep\ufffd',
    });
    expect(summaryOf(res.body, 'ignored_invalid_timestamp').warnings[0].details).toMatchObject({
      distinctId: 'nul-sent-at',
      field: 'sent_at',
      value: 'bad\ufffd\ufffd',
    });
    const perf = await warningsOf(`?q=${other}`);
    expect(perf.body.results[0].warnings[0].details).toMatchObject({ distinctId: 'perf\ufffd' });
  });

  it('an alias over 400 characters is shown cut to 200 without splitting a surrogate pair', async () => {
    const uuid = randomUUID();
    const alias = `${'a'.repeat(199)}😀${'b'.repeat(300)}`;
    const body = JSON.stringify({
      api_key: 'TOKEN',
      batch: [{ event: '$create_alias', distinct_id: 'long-alias-user', uuid, properties: { alias } }],
    });
    expect(await sendBatch(body)).toEqual({ status: 200, body: { status: 1 } });
    const res = await warningsOf(`?q=${uuid}`);
    expect(res.body.results[0].warnings[0].details).toMatchObject({
      eventUuid: uuid,
      illegalDistinctId: `${'a'.repeat(199)}😀`,
      otherDistinctId: 'long-alias-user',
      reason: 'distinct id over 400 characters',
    });
  });
});

describe('GET /api/projects/:id/ingestion_warnings/', () => {
  it('groups by type, most recently seen first, with the newest examples first and at most `examples` of them', async () => {
    const { projectId, apiKey } = await createAccount(api.orm);
    const at = (minutesAgo: number) => new Date(Date.now() - minutesAgo * 60_000).toISOString();
    await sql(
      api.orm,
      `insert into ingestion_warning (project_id, type, event_uuid, distinct_id, details, timestamp) values
         (?, 'event_timestamp_in_future', null, 'd1', '{"n":1}', ?), (?, 'event_timestamp_in_future', null, 'd2', '{"n":2}', ?),
         (?, 'event_timestamp_in_future', null, 'd3', '{"n":3}', ?), (?, 'ignored_invalid_timestamp', null, 'd4', '{"n":4}', ?),
         (?, 'ignored_invalid_timestamp', null, 'd5', '{"n":5}', ?)`,
      [projectId, at(30), projectId, at(10), projectId, at(20), projectId, at(5), projectId, at(60 * 24 * 31)],
    );
    const res = await warningsOf('?examples=2', apiKey, projectId);
    expect(res.status).toBe(200);
    expect(res.body.results.map((s: any) => [s.type, s.count])).toEqual([
      ['ignored_invalid_timestamp', 1], // 31 days old: out of the window
      ['event_timestamp_in_future', 3],
    ]);
    expect(res.body.results[1].warnings.map((w: any) => w.details.n)).toEqual([2, 3]);
    expect(res.body.results[1].lastSeen).toBe(res.body.results[1].warnings[0].timestamp);

    const filtered = await warningsOf('?type=ignored_invalid_timestamp', apiKey, projectId);
    expect(filtered.body.results.map((s: any) => s.type)).toEqual(['ignored_invalid_timestamp']);
    const searched = await warningsOf('?q=d3', apiKey, projectId);
    expect(searched.body.results).toEqual([expect.objectContaining({ type: 'event_timestamp_in_future', count: 1 })]);
    expect((await warningsOf('?q=nothing-matches', apiKey, projectId)).body).toEqual({ results: [] });
  });

  it('another project’s warnings are invisible, through its id and in one’s own list', async () => {
    const other = await createAccount(api.orm);
    const uuid = randomUUID();
    const body = `{"api_key":"TOKEN","batch":[{"event":"x","distinct_id":"other-user","uuid":"${uuid}","properties":${deep(200)}}]}`;
    expect((await sendBatch(body, other.projectToken)).status).toBe(200);
    expect(JSON.stringify((await warningsOf(`?q=${uuid}`, other.apiKey, other.projectId)).body)).toContain(uuid);

    expect((await warningsOf(`?q=${uuid}`)).body).toEqual({ results: [] });
    const foreign = await warningsOf('', account.apiKey, other.projectId);
    expect([403, 404]).toContain(foreign.status);
    expect(foreign.body).toMatchObject({
      type: expect.any(String),
      code: expect.any(String),
      detail: expect.any(String),
    });
  });

  it('needs project:read', async () => {
    const key = await createKey(api.orm, account.userId, { scopes: ['person:read'] });
    const res = await warningsOf('', key);
    expect(res.status).toBe(403);
    expect(res.body).toMatchObject({ type: 'authentication_error', code: 'permission_denied' });
    const readKey = await createKey(api.orm, account.userId, { scopes: ['project:read'] });
    expect((await warningsOf('', readKey)).status).toBe(200);
    const current = await call(api.baseUrl, 'GET', '/api/projects/@current/ingestion_warnings/', { key: readKey });
    expect(current.status).toBe(200);
  });

  it('refuses bad query input with a 400 and PostHog’s error body, never a 500', async () => {
    for (const query of [
      '?examples=abc',
      '?examples=0',
      '?examples=100000',
      `?q=${'x'.repeat(1001)}`,
      `?type=${'t'.repeat(101)}`,
    ]) {
      const res = await warningsOf(query);
      expect(res.status, query).toBe(400);
      expect(res.body, query).toMatchObject({
        type: 'validation_error',
        code: expect.any(String),
        attr: expect.any(String),
      });
    }
    const nul = await warningsOf('?q=%00');
    expect(nul.status).toBe(400);
    expect(
      (await call(api.baseUrl, 'GET', '/api/projects/abc/ingestion_warnings/', { key: account.apiKey })).status,
    ).toBe(404);
  });
});
