// Every body shape and encoding PostHog accepts, and each rejection (whole request, nothing stored).
import LZString from 'lz-string';
import { randomUUID } from 'node:crypto';
import { gzipSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { sql } from '../../db.ts';
import { apiWithAccount, createAccount } from '../../helpers.ts';

const { api, account } = await apiWithAccount();

async function send(path: string, body: string | Buffer, headers: Record<string, string> = {}, method = 'POST') {
  const res = await fetch(api.baseUrl + path, {
    method,
    headers: { 'content-type': 'application/json', ...headers },
    body: method === 'GET' ? undefined : (body as BodyInit),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null, headers: res.headers };
}
const countEvents = async (name: string) =>
  (
    await sql(api.orm, `select count(*)::int as n from event where project_id = ? and event = ?`, [
      account.projectId,
      name,
    ])
  )[0].n;
const event = (name: string, extra: Record<string, unknown> = {}) => ({
  event: name,
  distinct_id: 'd1',
  properties: {},
  ...extra,
});

describe('accepted shapes and encodings', () => {
  const cases: [string, () => Promise<{ status: number }>][] = [
    [
      'batch object on /batch',
      () => send('/batch/', JSON.stringify({ api_key: account.projectToken, batch: [event('shape-batch')] })),
    ],
    ['array on /e', () => send('/e', JSON.stringify([event('shape-array', { token: account.projectToken })]))],
    [
      'single event on /capture',
      () => send('/capture/', JSON.stringify(event('shape-single', { api_key: account.projectToken }))),
    ],
    [
      'single event on /i/v0/e',
      () => send('/i/v0/e/', JSON.stringify(event('shape-v0', { properties: { token: account.projectToken } }))),
    ],
    [
      'gzip by header',
      () =>
        send('/batch', gzipSync(JSON.stringify({ api_key: account.projectToken, batch: [event('shape-gzip')] })), {
          'content-encoding': 'gzip',
        }),
    ],
    [
      'gzip sniffed, no header',
      () => send('/track', gzipSync(JSON.stringify(event('shape-sniffed', { token: account.projectToken })))),
    ],
    [
      'gzip-js by query',
      () =>
        send(
          '/e?compression=gzip-js',
          gzipSync(JSON.stringify([event('shape-gzipjs', { token: account.projectToken })])),
        ),
    ],
    [
      'lz64',
      () =>
        send(
          '/e?compression=lz64',
          LZString.compressToBase64(JSON.stringify([event('shape-lz', { token: account.projectToken })])),
        ),
    ],
    [
      'base64 body',
      () =>
        send(
          '/e',
          Buffer.from(JSON.stringify([event('shape-b64', { token: account.projectToken })])).toString('base64'),
        ),
    ],
    [
      'form data= field (base64)',
      () =>
        send(
          '/e',
          `data=${encodeURIComponent(Buffer.from(JSON.stringify([event('shape-form', { token: account.projectToken })])).toString('base64'))}`,
          {
            'content-type': 'application/x-www-form-urlencoded',
          },
        ),
    ],
    [
      'data= query on GET',
      () =>
        send(
          `/e?data=${encodeURIComponent(JSON.stringify(event('shape-get', { token: account.projectToken })))}`,
          '',
          {},
          'GET',
        ),
    ],
  ];
  it.each(cases)('%s', async (name, run) => {
    const res = await run();
    expect(res.status).toBe(200);
    const eventName = { 'batch object on /batch': 'shape-batch' }[name] ?? null;
    if (eventName) expect(await countEvents(eventName)).toBe(1);
  });

  it('stored every shape', async () => {
    for (const name of [
      'shape-array',
      'shape-single',
      'shape-v0',
      'shape-gzip',
      'shape-sniffed',
      'shape-gzipjs',
      'shape-lz',
      'shape-b64',
      'shape-form',
      'shape-get',
    ])
      expect(await countEvents(name), name).toBe(1);
  });

  it('turns an engage payload into $identify with $set', async () => {
    const res = await send(
      '/engage',
      JSON.stringify({ $token: account.projectToken, $distinct_id: 'engaged', $set: { tier: 'gold' } }),
    );
    expect(res.status).toBe(200);
    const [person] = await sql(
      api.orm,
      `select p.properties from person p join person_distinct_id d on d.person_id = p.id where d.distinct_id = 'engaged' and d.project_id = ?`,
      [account.projectId],
    );
    expect(person.properties.tier).toBe('gold');
  });

  it('answers beacon=1 with 204, preflight with CORS headers, and repeats of one uuid store one event', async () => {
    const uuid = randomUUID();
    const body = JSON.stringify({
      api_key: account.projectToken,
      batch: [event('dedup', { uuid, timestamp: '2026-01-01T00:00:00Z' })],
    });
    expect((await send('/batch?beacon=1', body)).status).toBe(204);
    expect((await send('/batch', body)).status).toBe(200);
    expect(await countEvents('dedup')).toBe(1);
    const preflight = await fetch(`${api.baseUrl}/batch/`, {
      method: 'OPTIONS',
      headers: { origin: 'https://app.example.com' },
    });
    expect(preflight.status).toBe(204);
    expect(preflight.headers.get('access-control-allow-origin')).toBe('https://app.example.com');
  });

  it('corrects the client clock with sent_at', async () => {
    const sentAt = new Date(Date.now() + 3600_000); // client clock one hour fast
    const timestamp = new Date(sentAt.getTime() - 5000);
    await send(
      '/batch',
      JSON.stringify({
        api_key: account.projectToken,
        sent_at: sentAt.toISOString(),
        batch: [event('skewed', { timestamp: timestamp.toISOString() })],
      }),
    );
    const [row] = await sql(api.orm, `select timestamp from event where project_id = ? and event = 'skewed'`, [
      account.projectId,
    ]);
    const stored = new Date(row.timestamp).getTime();
    expect(Math.abs(stored - (Date.now() - 5000))).toBeLessThan(10_000);
  });
});

describe('NUL characters', () => {
  it('are replaced with U+FFFD in captured events instead of failing the request', async () => {
    const res = await send(
      '/batch',
      JSON.stringify({
        api_key: account.projectToken,
        batch: [event('nul\u0000name', { properties: { 'k\u0000': 'v\u0000', $set: { a: 'b\u0000' } } })],
      }),
    );
    expect(res.status).toBe(200);
    expect(await countEvents('nul\uFFFDname')).toBe(1);
  });
});

describe('isolation', () => {
  it('deduplicates event uuids per project, never across projects', async () => {
    const other = await createAccount(api.orm);
    const uuid = randomUUID();
    const body = (token: string) =>
      JSON.stringify({ api_key: token, batch: [event('same-uuid', { uuid, timestamp: '2026-02-01T00:00:00Z' })] });
    await send('/batch', body(other.projectToken));
    await send('/batch', body(account.projectToken));
    expect(await countEvents('same-uuid')).toBe(1);
  });
});

describe('rejections: the whole request, nothing stored', () => {
  const rejections: [string, () => unknown, number, string][] = [
    ['no token', () => ({ batch: [event('r1')] }), 401, 'event submitted without an api_key'],
    [
      'personal key as token',
      () => ({ api_key: 'phx_abc', batch: [event('r2')] }),
      401,
      'API key is not valid: personal_api_key',
    ],
    [
      'token too long',
      () => ({ api_key: `phc_${'x'.repeat(80)}`, batch: [event('r3')] }),
      401,
      'API key is not valid: too_long',
    ],
    [
      'inconsistent tokens',
      () => [event('r4', { token: account.projectToken }), event('r4', { token: 'phc_other' })],
      401,
      'batch submitted with inconsistent api_key values',
    ],
    [
      'unknown token',
      () => ({ api_key: 'phc_unknown', batch: [event('r5')] }),
      401,
      'Project API key invalid. You can find your project API key in PostHog project settings.',
    ],
    [
      'empty event name (one of two)',
      () => ({ api_key: account.projectToken, batch: [event('r6-good'), event('')] }),
      400,
      'event submitted with an empty event name',
    ],
    [
      'missing distinct_id (one of two)',
      () => ({ api_key: account.projectToken, batch: [event('r7-good'), { event: 'r7', properties: {} }] }),
      400,
      'event submitted without a distinct_id',
    ],
    ['empty batch', () => ({ api_key: account.projectToken, batch: [] }), 400, 'request holds no event'],
    [
      'object without event on /batch',
      () => ({ api_key: account.projectToken, distinct_id: 'x' }),
      400,
      'non-engage request missing event name attribute',
    ],
  ];
  it.each(rejections)('%s', async (_name, body, status, detail) => {
    const res = await send('/batch', JSON.stringify(body()));
    expect(res.status).toBe(status);
    expect(res.body.detail).toBe(detail);
    expect(Object.keys(res.body).sort()).toEqual(['attr', 'code', 'detail', 'type']);
  });

  it('stored nothing from rejected requests', async () => {
    const [row] = await sql(api.orm, `select count(*)::int as n from event where project_id = ? and event like 'r%'`, [
      account.projectId,
    ]);
    expect(row.n).toBe(0);
  });

  it('answers malformed JSON and bad gzip with 400, and an oversize body with 413', async () => {
    expect((await send('/batch', '{"api_key": ')).status).toBe(400);
    expect(
      (await send('/batch', Buffer.from([0x1f, 0x8b, 0x08, 0x00, 0x01]), { 'content-encoding': 'gzip' })).status,
    ).toBe(400);
    const big = JSON.stringify({
      api_key: account.projectToken,
      // 2.7 MB in three events, each under PostHog's 1 MB event limit (MAX_EVENT_BYTES).
      batch: [1, 2, 3].map((i) => event(`big-${i}`, { properties: { blob: 'x'.repeat(900 * 1024) } })),
    });
    const res = await send('/e', big);
    expect(res.status).toBe(413);
    expect(res.body.code).toBe('payload_too_large');
    expect((await send('/batch', big)).status).toBe(200); // /batch allows 20 MB
  });
});
