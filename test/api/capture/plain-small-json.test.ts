// plainSmallJson, /flags's fast path for small JSON bodies: whatever it answers is what decodeSdkPayload
// answers for the same request, and every body it does not take (another encoding, a form, data=, a hint,
// invalid JSON or UTF-8, a large body) is left to decodeSdkPayload.
import fc from 'fast-check';
import type { Context } from 'koa';
import { gzipSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { decodeSdkPayload, plainSmallJson } from '../../../api/capture/decode.ts';
import { config } from '../../../shared/platform/config.ts';

const LIMIT = 1024 * 1024;
function ctxOf(query: Record<string, string> = {}, headers: Record<string, string> = {}) {
  const lower = Object.fromEntries(Object.entries(headers).map(([k, v]) => [k.toLowerCase(), v]));
  return { query, get: (name: string) => lower[name.toLowerCase()] ?? '', deps: { config } } as unknown as Context;
}
const FLAGS = { token: 'phc_x', distinct_id: 'd1', person_properties: { plan: 'pro', name: 'é ✓ 😀' } };

describe('plainSmallJson', () => {
  it('parses a small plain JSON object, whatever JSON content type (or none) it came with', () => {
    const body = Buffer.from(JSON.stringify(FLAGS));
    expect(plainSmallJson(ctxOf(), body, LIMIT)).toEqual(FLAGS);
    expect(plainSmallJson(ctxOf({ v: '2' }, { 'Content-Type': 'text/plain' }), body, LIMIT)).toEqual(FLAGS);
  });

  it('leaves every other body to decodeSdkPayload', () => {
    const text = JSON.stringify(FLAGS);
    const body = Buffer.from(text);
    const declined: [string, Context, Buffer, number?][] = [
      ['gzip', ctxOf(), gzipSync(text)],
      ['base64', ctxOf(), Buffer.from(Buffer.from(text).toString('base64'))],
      ['a list', ctxOf(), Buffer.from(`[${text}]`)],
      ['leading space', ctxOf(), Buffer.from(` ${text}`)],
      ['a compression hint in the query', ctxOf({ compression: 'base64' }), body],
      ['Content-Encoding', ctxOf({}, { 'Content-Encoding': 'gzip' }), body],
      ['a form', ctxOf({}, { 'Content-Type': 'application/x-www-form-urlencoded' }), body],
      ["the query's data=", ctxOf({ data: text }), body],
      ['invalid JSON', ctxOf(), Buffer.from('{"token":')],
      ['invalid UTF-8', ctxOf(), Buffer.concat([Buffer.from('{"a":"'), Buffer.from([0xff]), Buffer.from('"}')])],
      ['over 8 KB', ctxOf(), Buffer.from(JSON.stringify({ ...FLAGS, pad: 'x'.repeat(9000) }))],
      ['over the limit', ctxOf(), body, body.length - 1],
      ['empty', ctxOf(), Buffer.alloc(0)],
    ];
    for (const [name, ctx, raw, limit] of declined)
      expect(plainSmallJson(ctx, raw, limit ?? LIMIT), name).toBeUndefined();
  });

  it('property: what it parses, decodeSdkPayload decodes the same', async () => {
    const headers = fc.record(
      { 'Content-Type': fc.constantFrom('application/json', 'text/plain', 'application/x-www-form-urlencoded') },
      { requiredKeys: [] },
    );
    const query = fc.record(
      { compression: fc.constantFrom('gzip', 'lz64', 'base64', 'none', ''), data: fc.constantFrom('', '{"a":1}') },
      { requiredKeys: [] },
    );
    const body = fc.oneof(
      fc.jsonValue().map((value) => JSON.stringify({ value })),
      fc.string({ maxLength: 40 }).map((tail) => `{${tail}`),
    );
    await fc.assert(
      fc.asyncProperty(body, query, headers, async (text, q, h) => {
        const raw = Buffer.from(text);
        const fast = plainSmallJson(ctxOf(q, h), raw, LIMIT);
        if (fast === undefined) return;
        expect(await decodeSdkPayload(ctxOf(q, h), raw, LIMIT, false)).toEqual(fast);
        expect(await decodeSdkPayload(ctxOf(q, h), raw, LIMIT, true)).toEqual(fast);
      }),
      { numRuns: 300 },
    );
  });
});
