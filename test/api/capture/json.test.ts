// parseJsonYielding against JSON.parse: the same values, the same refusals, and the event loop free.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { JsonTooDeep, parseJsonYielding } from '../../../api/capture/json.ts';

const outcome = async (parse: () => unknown) => {
  try {
    return { value: await parse() };
  } catch (error) {
    return { error: (error as Error).name };
  }
};

describe('parseJsonYielding', () => {
  // Tiny thresholds, so that every container of the generated documents is walked by our code.
  it.each([1, 8, 64])(
    'parses any JSON text as JSON.parse does (containers over %i characters walked)',
    async (smallChars) => {
      await fc.assert(
        fc.asyncProperty(fc.json({ maxDepth: 6 }), async (text) => {
          expect(await parseJsonYielding(text, { smallChars })).toEqual(JSON.parse(text));
        }),
        { numRuns: 300 },
      );
    },
  );

  it('refuses what JSON.parse refuses, and only that', async () => {
    const mangled = fc.tuple(
      fc.json({ maxDepth: 4 }),
      fc.nat(),
      fc.constantFrom('', '[', ']', '{', '}', ',', ':', '"', '\\', 'x', ' ', '1'),
    );
    await fc.assert(
      fc.asyncProperty(mangled, async ([text, at, insert]) => {
        const i = at % (text.length + 1);
        const broken = text.slice(0, i) + insert + text.slice(i + (insert === '' ? 1 : 0));
        const theirs = await outcome(() => JSON.parse(broken));
        const ours = await outcome(() => parseJsonYielding(broken, { smallChars: 4 }));
        expect(ours).toEqual(theirs);
      }),
      { numRuns: 2000 },
    );
  });

  it('keeps "__proto__" a plain key, as JSON.parse does', async () => {
    const text = '{"__proto__": {"polluted": true}, "a": [1, {"__proto__": 2}]}';
    const parsed = (await parseJsonYielding(text, { smallChars: 1 })) as any;
    expect(parsed).toEqual(JSON.parse(text));
    expect(Object.getPrototypeOf(parsed)).toBe(Object.prototype);
    expect(({} as any).polluted).toBeUndefined();
  });

  it('refuses nesting deeper than it keeps track of, and an unterminated text without parsing it', async () => {
    await expect(parseJsonYielding('['.repeat(200_001) + ']'.repeat(200_001))).rejects.toBeInstanceOf(JsonTooDeep);
    await expect(parseJsonYielding(`[${'{},'.repeat(100_000)}{}`, { smallChars: 1000 })).rejects.toBeInstanceOf(
      SyntaxError,
    );
  });

  it('gives the event loop many turns while it parses a 20 MB batch (JSON.parse gives none)', async () => {
    const event = (i: number) => ({
      event: '$pageview',
      distinct_id: `user-${i % 1000}`,
      properties: { $current_url: `https://example.com/${i}`, n: i },
    });
    const text = JSON.stringify({ api_key: 'phc_x', batch: Array.from({ length: 200_000 }, (_, i) => event(i)) });
    expect(text.length).toBeGreaterThan(19_000_000);
    const turns = async (parse: () => unknown) => {
      let count = 0;
      const timer = setInterval(() => count++, 0);
      try {
        return { parsed: await parse(), count };
      } finally {
        clearInterval(timer);
      }
    };
    const ours = await turns(() => parseJsonYielding(text));
    const native = await turns(() => JSON.parse(text));
    expect(native.count).toBe(0);
    expect(ours.count).toBeGreaterThan(10);
    expect(ours.parsed).toEqual(native.parsed);
  });
});
