// posthog-js's `compression=lz64`: lz-string's compressToBase64 output, decoded here with a bound on
// the output. lz-string's own decompressor cannot be bounded: a 70 KB body of self-referencing codes
// decodes to ~10⁹ characters. This one measures the output before writing it, stops as soon as it
// passes `maxChars`, reserves the output's bytes from the caller's budget before allocating them, and
// works in turns of a few milliseconds (turns.ts) so no request, and no crowd of them, freezes the process.
//
// The format (lz-string 1.5): a bit stream, 6 bits per base64 character, most significant first;
// each code is read least significant bit first, `numBits` wide. Codes 0 and 1 introduce an 8- or
// 16-bit literal that becomes a dictionary entry; 2 ends the stream; 3 and up are dictionary entries.
// After each code the entry "previous output + first char of this output" joins the dictionary (a
// code one past the dictionary is that very entry: LZW's KwKwK case). The width grows by one bit
// when the dictionary fills the current width.
//
// Every dictionary entry is a stretch of the output already written: a literal where it was written,
// "previous + first char of this one" the previous output and the char after it. So the dictionary
// is (offset, length) pairs and writing an entry is a copy within the output (a memmove for long
// ones), not a string per entry. The output is one array of its exact size, of bytes when every char
// is below 256 (JSON text mostly is: half the memory), else of 16-bit units.
import { slicer } from './turns.ts';

export class Lz64TooLarge extends Error {
  constructor(maxChars: number) {
    super(`lz64 payload decodes to more than ${maxChars} characters`);
  }
}

// Character → 6-bit value. lz-string reads unknown characters (and '=') as 0; so does this table.
const BASE64_VALUES = new Uint8Array(128);
for (const [i, ch] of [...'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/'].entries())
  BASE64_VALUES[ch.charCodeAt(0)] = i;

// Work units (codes + characters written) between clock reads: small, so that a decode starting in a
// poll phase beside many others (a barrage) gives way after a fraction of a millisecond.
const CHECK_EVERY = 1 << 11;

/**
 * Decodes lz-string base64 `input`: a string, or ASCII bytes (read as the same string without making
 * one). Resolves to the text, or null where lz-string finds no valid
 * stream (it answers null or ""); rejects with Lz64TooLarge past `maxChars` UTF-16 code units.
 * A first pass only measures the output (no output is written: a bomb costs a walk over its codes
 * until it passes `maxChars`); `reserve(bytes)` is called with the output's exact size before it is
 * allocated, and may throw to stop; a second pass writes it.
 */
export async function decompressLz64(
  input: string | Uint8Array,
  maxChars: number,
  reserve: (bytes: number) => void = () => undefined,
): Promise<string | null> {
  const measured = await walk(input, maxChars, null);
  if (!measured) return null;
  reserve(measured.length * (measured.wide ? 2 : 1));
  const out = measured.wide ? new Uint16Array(measured.length) : new Uint8Array(measured.length);
  try {
    await walk(input, measured.length, out);
    // latin1 and utf16le keep every code unit as it is (lone surrogates included, as lz-string's output does).
    return Buffer.from(out.buffer, 0, out.byteLength).toString(measured.wide ? 'utf16le' : 'latin1');
  } finally {
    (out.buffer as ArrayBuffer).transfer(0); // freed now, not at the next garbage collection
  }
}

/**
 * One pass over the codes of `input`. With `out` null it only measures: the output's length and
 * whether a char of 256 or more appears (null: not a valid stream); with `out`, of that length, it
 * writes the output into it.
 */
async function walk(
  input: string | Uint8Array,
  maxChars: number,
  out: Uint8Array | Uint16Array | null,
): Promise<{ length: number; wide: boolean } | null> {
  const length = input.length;
  if (length === 0) return null;
  const text = typeof input === 'string' ? input : null;
  const bytes = typeof input === 'string' ? null : input;
  const valueAt = (index: number) => {
    const code = index >= length ? 0 : text ? text.charCodeAt(index) : bytes![index];
    return code < 128 ? BASE64_VALUES[code] : 0;
  };
  let val = valueAt(0);
  let position = 32;
  let index = 1;
  const readBits = (count: number) => {
    let bits = 0;
    for (let power = 0; power < count; power++) {
      if (val & position) bits |= 1 << power;
      position >>= 1;
      if (position === 0) {
        position = 32;
        val = valueAt(index++);
      }
    }
    return bits;
  };

  // Dictionary: entry k is output[offset[k], offset[k] + size[k]).
  let capacity = 1024;
  let offset = new Int32Array(capacity);
  let size = new Int32Array(capacity);
  let dictSize = 3; // codes 0-2 are the control codes
  const addEntry = (at: number, count: number) => {
    if (dictSize === capacity) {
      capacity *= 2;
      const grown = [new Int32Array(capacity), new Int32Array(capacity)];
      grown[0].set(offset);
      grown[1].set(size);
      [offset, size] = grown;
    }
    offset[dictSize] = at;
    size[dictSize] = count;
    return dictSize++;
  };

  let written = 0;
  let wide = false;
  const writeLiteral = (char: number) => {
    if (written === maxChars) throw new Lz64TooLarge(maxChars);
    if (char > 255) wide = true;
    if (out) out[written] = char;
    return addEntry(written++, 1);
  };
  /** Writes `count` units from `from` at the end of the output (measures them only, without `out`). */
  const copy = (from: number, count: number) => {
    if (written + count > maxChars) throw new Lz64TooLarge(maxChars);
    if (out) {
      if (count < 32) for (let i = 0; i < count; i++) out[written + i] = out[from + i];
      else out.copyWithin(written, from, from + count);
    }
    written += count;
  };
  const workOf = (count: number) => (out ? 1 + (count >> 4) : 1);

  const firstKind = readBits(2);
  if (firstKind > 1) return null; // 2: an empty stream (lz-string answers ""), 3: not a stream
  let previous = writeLiteral(readBits(firstKind === 0 ? 8 : 16));
  let previousAt = 0; // where the previous output starts
  let numBits = 3;
  let enlargeIn = 4;

  let work = 0;
  const pause = slicer();
  for (;;) {
    if (index > length) return null; // ran out of input before the end code
    let code = readBits(numBits);
    if (code === 2) break;
    const at = written;
    if (code < 2) {
      code = writeLiteral(readBits(code === 0 ? 8 : 16));
      if (--enlargeIn === 0) enlargeIn = 2 ** numBits++;
      work++;
    } else if (code === dictSize) {
      // KwKwK: the entry being defined, previous output + its own first character.
      copy(previousAt, size[previous]);
      copy(previousAt, 1);
      work += workOf(size[previous]);
    } else if (code > dictSize) {
      return null;
    } else {
      copy(offset[code], size[code]);
      work += workOf(size[code]);
    }
    // The previous output and the first char of this one: contiguous in the output.
    addEntry(previousAt, size[previous] + 1);
    previous = code;
    previousAt = at;
    if (--enlargeIn === 0) enlargeIn = 2 ** numBits++;
    if (work >= CHECK_EVERY) {
      work = 0;
      await pause();
    }
  }
  return { length: written, wide };
}
