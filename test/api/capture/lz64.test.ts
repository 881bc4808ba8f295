// Our bounded lz-string decoder against the lz-string package posthog-js compresses with.
import fc from 'fast-check';
import LZString from 'lz-string';
import { describe, expect, it } from 'vitest';
import { decompressLz64, Lz64TooLarge } from '../../../api/capture/lz64.ts';
import { lz64Bomb } from './bombs.ts';

const LIMIT = 10_000_000;
const BASE64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=';
// Any UTF-16 code unit, lone surrogates included: lz-string compresses code units, not code points.
const codeUnit = fc.integer({ min: 0, max: 0xffff }).map((n) => String.fromCharCode(n));

describe('decompressLz64', () => {
  it('decodes what LZString.compressToBase64 made, for any string, from the string or its bytes', async () => {
    const strings = fc.oneof(
      fc.string({ unit: 'binary', maxLength: 3000 }),
      fc.string({ unit: codeUnit, maxLength: 3000 }),
      fc.string({ maxLength: 3000 }),
    );
    await fc.assert(
      fc.asyncProperty(strings, async (text) => {
        const compressed = LZString.compressToBase64(text);
        expect(await decompressLz64(compressed, LIMIT)).toBe(text === '' ? null : text);
        // The body's bytes, as the API reads them: the same text.
        expect(await decompressLz64(Buffer.from(compressed, 'latin1'), LIMIT)).toBe(text === '' ? null : text);
      }),
      { numRuns: 400 },
    );
  });

  it('decodes long repetitive text (the dictionary grows past several code widths)', async () => {
    const text = JSON.stringify(
      Array.from({ length: 5000 }, (_, i) => ({
        event: '$pageview',
        distinct_id: `user-${i % 37}`,
        properties: { n: i },
      })),
    );
    expect(await decompressLz64(LZString.compressToBase64(text), LIMIT)).toBe(text);
  });

  it('agrees with lz-string on arbitrary base64 input: the same text, or no text where it finds none', async () => {
    const base64 = fc.string({ unit: fc.constantFrom(...BASE64), maxLength: 200 });
    await fc.assert(
      fc.asyncProperty(base64, async (input) => {
        const ours = await decompressLz64(input, LIMIT);
        // A stream opening with code 3 is none lz-string makes; it reads on with an undefined entry.
        if (input !== '' && (BASE64.indexOf(input[0]) & 48) === 48) {
          expect(ours).toBeNull();
          return;
        }
        let theirs: string | null;
        try {
          theirs = LZString.decompressFromBase64(input);
        } catch {
          theirs = null;
        }
        expect(ours).toBe(theirs === '' ? null : theirs);
      }),
      { numRuns: 2000 },
    );
  });

  it('stops as soon as the output passes the limit', async () => {
    const text = 'x'.repeat(50_000);
    await expect(decompressLz64(LZString.compressToBase64(text), 49_999)).rejects.toBeInstanceOf(Lz64TooLarge);
    expect(await decompressLz64(LZString.compressToBase64(text), 50_000)).toBe(text);
    const started = performance.now();
    await expect(decompressLz64(lz64Bomb(261 * 1024), 2 * 1024 * 1024)).rejects.toBeInstanceOf(Lz64TooLarge);
    expect(performance.now() - started).toBeLessThan(1000);
  });

  it('refuses a bomb by measuring it, without writing its output', async () => {
    const reserved: number[] = [];
    const started = performance.now();
    await expect(
      decompressLz64(lz64Bomb(261 * 1024), 20 * 1024 * 1024, (bytes) => reserved.push(bytes)),
    ).rejects.toBeInstanceOf(Lz64TooLarge);
    expect(performance.now() - started).toBeLessThan(1000);
    expect(reserved).toEqual([]); // nothing allocated for the output
  });

  it('reserves the exact output size before writing it: a byte per char below 256, two otherwise', async () => {
    for (const [text, bytesPerChar] of [
      ['{"event":"x"}'.repeat(100), 1],
      ['{"event":"ü€"}'.repeat(100), 2],
    ] as const) {
      const reserved: number[] = [];
      expect(await decompressLz64(LZString.compressToBase64(text), LIMIT, (bytes) => reserved.push(bytes))).toBe(text);
      expect(reserved).toEqual([text.length * bytesPerChar]);
    }
  });

  it('yields to the event loop while decoding a large output', async () => {
    // Large enough that decoding outlasts a slice (8 ms) many times over, however fast the machine.
    const text = JSON.stringify(Array.from({ length: 200_000 }, (_, i) => ({ i, id: `user-${(i * 7919) % 100003}` })));
    const compressed = LZString.compressToBase64(text);
    let ticks = 0;
    const timer = setInterval(() => ticks++, 1);
    try {
      expect(await decompressLz64(compressed, LIMIT)).toBe(text);
    } finally {
      clearInterval(timer);
    }
    expect(ticks).toBeGreaterThan(1);
  });

  it('decodes running together take turns: one slice per event-loop iteration, not one slice each', async () => {
    // With a setImmediate per decode, every decode that paused resumed in the same iteration, so 16
    // decodes held each iteration for 16 slices. Counted in iterations (a setImmediate chain), not in
    // milliseconds: 16 decodes together must take many times the iterations one decode takes alone.
    const text = JSON.stringify(Array.from({ length: 100_000 }, (_, i) => ({ i, id: `user-${(i * 7919) % 100003}` })));
    const compressed = LZString.compressToBase64(text);
    const iterationsDuring = async (decodes: number) => {
      let iterations = 0;
      let running = true;
      const tick = () => {
        iterations++;
        if (running) setImmediate(tick);
      };
      setImmediate(tick);
      try {
        const outputs = await Promise.all(Array.from({ length: decodes }, () => decompressLz64(compressed, LIMIT)));
        for (const output of outputs) expect(output).toBe(text);
      } finally {
        running = false;
      }
      return iterations;
    };
    const alone = await iterationsDuring(1);
    const together = await iterationsDuring(16);
    expect(alone).toBeGreaterThan(1);
    expect(together).toBeGreaterThan(alone * 6);
  });
});
