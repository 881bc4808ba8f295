// posthog-js's `compression=lz64`: lz-string's compressToBase64 output, decoded here with a bound on
// the output. lz-string's own decompressor cannot be bounded: a 70 KB body of self-referencing codes
// decodes to ~10⁹ characters. This one stops as soon as the output passes `maxChars`, reserves every
// byte of output it allocates from the caller's budget before it allocates it, and yields to the
// event loop every few milliseconds so one request never freezes the process.
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
// ones), not a string per entry. The output is one array, of bytes while every char is below 256
// (JSON text mostly is: half the memory), widened to 16-bit units at the first char that is not.

export class Lz64TooLarge extends Error {
  constructor(maxChars: number) {
    super(`lz64 payload decodes to more than ${maxChars} characters`);
  }
}

// Character → 6-bit value. lz-string reads unknown characters (and '=') as 0; so does this table.
const BASE64_VALUES = new Uint8Array(128);
for (const [i, ch] of [...'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/'].entries())
  BASE64_VALUES[ch.charCodeAt(0)] = i;

const SLICE_MS = 8; // longest stretch of work before giving other requests a turn
const CHECK_EVERY = 1 << 14; // work units (codes + characters written) between clock reads

const yieldToEventLoop = () => new Promise<void>((resolve) => setImmediate(resolve));

/**
 * Decodes lz-string base64 `input`. Resolves to the text, or null where lz-string finds no valid
 * stream (it answers null or ""); rejects with Lz64TooLarge past `maxChars` UTF-16 code units.
 * `reserve(bytes)` is called before the output grows by that many bytes; it may throw to stop.
 */
export async function decompressLz64(
  input: string,
  maxChars: number,
  reserve: (bytes: number) => void = () => undefined,
): Promise<string | null> {
  const length = input.length;
  if (length === 0) return null;
  const valueAt = (index: number) => {
    const code = index < length ? input.charCodeAt(index) : 0;
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

  // The output: bytes until a char of 256 or more appears, then 16-bit units.
  let out: Uint8Array | Uint16Array = new Uint8Array(0);
  let written = 0;
  /** Room for `count` more units, within maxChars and the caller's budget (doubling, so few copies). */
  const ensure = (count: number) => {
    const needed = written + count;
    if (needed <= out.length) return;
    if (needed > maxChars) throw new Lz64TooLarge(maxChars);
    const grownLength = Math.min(maxChars, Math.max(needed, out.length * 2, 4096));
    reserve((grownLength - out.length) * out.BYTES_PER_ELEMENT);
    const grown = out instanceof Uint8Array ? new Uint8Array(grownLength) : new Uint16Array(grownLength);
    grown.set(out.subarray(0, written));
    release(out);
    out = grown;
  };
  const widen = () => {
    reserve(out.length); // a second byte for each unit
    const wide = new Uint16Array(out.length);
    wide.set(out.subarray(0, written));
    release(out);
    out = wide;
  };
  const writeLiteral = (char: number) => {
    if (char > 255 && out instanceof Uint8Array) widen();
    ensure(1);
    out[written] = char;
    return addEntry(written++, 1);
  };
  /** Writes the entry at `from` of `count` units at the end of the output. */
  const copy = (from: number, count: number) => {
    ensure(count);
    if (count < 32) for (let i = 0; i < count; i++) out[written + i] = out[from + i];
    else out.copyWithin(written, from, from + count);
    written += count;
  };

  try {
    const firstKind = readBits(2);
    if (firstKind > 1) return null; // 2: an empty stream (lz-string answers ""), 3: not a stream
    let previous = writeLiteral(readBits(firstKind === 0 ? 8 : 16));
    let previousAt = 0; // where the previous output starts
    let numBits = 3;
    let enlargeIn = 4;

    let work = 0;
    let sliceStarted = performance.now();
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
        ensure(1);
        out[written++] = out[previousAt];
        work += 1 + (size[previous] >> 4);
      } else if (code > dictSize) {
        return null;
      } else {
        copy(offset[code], size[code]);
        work += 1 + (size[code] >> 4);
      }
      // The previous output and the first char of this one: contiguous in the output.
      addEntry(previousAt, size[previous] + 1);
      previous = code;
      previousAt = at;
      if (--enlargeIn === 0) enlargeIn = 2 ** numBits++;
      if (work >= CHECK_EVERY) {
        work = 0;
        if (performance.now() - sliceStarted > SLICE_MS) {
          await yieldToEventLoop();
          sliceStarted = performance.now();
        }
      }
    }
    // latin1 and utf16le keep every code unit as it is (lone surrogates included, as lz-string's output does).
    const bytes = Buffer.from(out.buffer, 0, written * out.BYTES_PER_ELEMENT);
    return bytes.toString(out instanceof Uint8Array ? 'latin1' : 'utf16le');
  } finally {
    release(out);
  }
}

/** Frees an output array now rather than at the next garbage collection (detaching its buffer). */
function release(array: Uint8Array | Uint16Array): void {
  if (array.buffer.byteLength > 0) (array.buffer as ArrayBuffer).transfer(0);
}
