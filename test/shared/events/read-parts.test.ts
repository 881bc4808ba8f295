import { describe, expect, it } from 'vitest';
import { byteOrder, inTurn, partBounds, partRange, partsFor } from '../../../shared/events/parts.ts';

describe('an experiment read in parts', () => {
  it('asks for the next part while this one is taken in, in order', async () => {
    const asked: number[] = [];
    const seen: string[] = [];
    for await (const answer of inTurn(3, async (i) => {
      asked.push(i);
      return `part ${i}`;
    })) {
      // While part i is being taken in, part i + 1 has already been asked for (none past it).
      seen.push(`${answer} with ${asked.join(',')} asked`);
    }
    expect(seen).toEqual(['part 0 with 0,1 asked', 'part 1 with 0,1,2 asked', 'part 2 with 0,1,2 asked']);
  });

  it('discards the part already asked for when the reader stops early, and only that one', async () => {
    const discarded: string[] = [];
    for await (const answer of inTurn(
      4,
      async (i) => `part ${i}`,
      (a) => discarded.push(a),
    ))
      if (answer === 'part 1') break;
    await new Promise(setImmediate); // (discarding runs as the pending answer settles)
    expect(discarded).toEqual(['part 2']);
  });

  it('sizes parts, bounds them without gaps or repeats, in byte order', () => {
    expect([partsFor(0, 3), partsFor(3, 3), partsFor(7, 3), partsFor(1e9, 3)]).toEqual([1, 1, 3, 64]);
    expect(partBounds(['b', 'b', null, 'd'])).toEqual(['b', 'd']);
    expect([0, 1, 2].map((i) => partRange(['b', 'd'], i))).toEqual([
      { from: null, to: 'b' },
      { from: 'b', to: 'd' },
      { from: 'd', to: null },
    ]);
    // U+FF5E sorts before U+1F600 in UTF-8 bytes (and code points), after it in UTF-16 units.
    expect(['😀', '～'].sort(byteOrder)).toEqual(['～', '😀']);
    expect(['😀', '～'].sort()).toEqual(['😀', '～']);
  });
});
