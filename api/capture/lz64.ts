// posthog-js's `compression=lz64`: lz-string's compressToBase64 output, decoded here with a bound on
// the output. lz-string's own decompressor cannot be bounded: a 70 KB body of self-referencing codes
// decodes to ~10⁹ characters. This one stops as soon as the output passes `maxChars`, keeps its
// dictionary as (prefix code, last char) pairs in typed arrays rather than strings, and yields to the
// event loop every few milliseconds so one request never freezes the process.
//
// The format (lz-string 1.5): a bit stream, 6 bits per base64 character, most significant first;
// each code is read least significant bit first, `numBits` wide. Codes 0 and 1 introduce an 8- or
// 16-bit literal that becomes a dictionary entry; 2 ends the stream; 3 and up are dictionary entries.
// After each code the entry "previous output + first char of this output" joins the dictionary (a
// code one past the dictionary is that very entry: LZW's KwKwK case). The width grows by one bit
// when the dictionary fills the current width.

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
 */
export async function decompressLz64(input: string, maxChars: number): Promise<string | null> {
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

  // Dictionary: entry k is entry prefix[k] followed by last[k] (prefix -1: a single character).
  let capacity = 1024;
  let prefix = new Int32Array(capacity);
  let last = new Uint16Array(capacity);
  let first = new Uint16Array(capacity);
  let size = new Int32Array(capacity); // characters in the entry
  let dictSize = 3; // codes 0-2 are the control codes
  const addEntry = (prefixCode: number, char: number) => {
    if (dictSize === capacity) {
      capacity *= 2;
      const grow = <T extends Int32Array | Uint16Array>(old: T, made: T) => {
        made.set(old);
        return made;
      };
      prefix = grow(prefix, new Int32Array(capacity));
      last = grow(last, new Uint16Array(capacity));
      first = grow(first, new Uint16Array(capacity));
      size = grow(size, new Int32Array(capacity));
    }
    prefix[dictSize] = prefixCode;
    last[dictSize] = char;
    first[dictSize] = prefixCode < 0 ? char : first[prefixCode];
    size[dictSize] = prefixCode < 0 ? 1 : size[prefixCode] + 1;
    return dictSize++;
  };

  // The output, in chunks of 2^16 code units: growing one contiguous array of millions of units
  // means copies that stall the event loop for 100 ms and more.
  const chunks: Uint16Array[] = [];
  let written = 0;
  const emit = (code: number) => {
    const count = size[code];
    if (written + count > maxChars) throw new Lz64TooLarge(maxChars);
    const end = written + count - 1;
    while (chunks.length <= end >>> 16) chunks.push(new Uint16Array(1 << 16));
    for (let at = end, k = code; k >= 0; k = prefix[k], at--) chunks[at >>> 16][at & 0xffff] = last[k];
    written += count;
    return count;
  };

  const firstKind = readBits(2);
  if (firstKind > 1) return null; // 2: an empty stream (lz-string answers ""), 3: not a stream
  let previous = addEntry(-1, readBits(firstKind === 0 ? 8 : 16));
  let numBits = 3;
  let enlargeIn = 4;
  emit(previous);

  let work = 0;
  let sliceStarted = performance.now();
  for (;;) {
    if (index > length) return null; // ran out of input before the end code
    let code = readBits(numBits);
    if (code === 2) break;
    if (code < 2) {
      code = addEntry(-1, readBits(code === 0 ? 8 : 16));
      if (--enlargeIn === 0) enlargeIn = 2 ** numBits++;
    }
    // KwKwK: the code names the entry being defined, previous output + its own first character.
    const selfReferencing = code === dictSize;
    if (selfReferencing) addEntry(previous, first[previous]);
    else if (code > dictSize) return null;
    work += emit(code) + 1;
    if (!selfReferencing) addEntry(previous, first[code]);
    previous = code;
    if (--enlargeIn === 0) enlargeIn = 2 ** numBits++;
    if (work >= CHECK_EVERY) {
      work = 0;
      if (performance.now() - sliceStarted > SLICE_MS) {
        await yieldToEventLoop();
        sliceStarted = performance.now();
      }
    }
  }
  // utf16le keeps every code unit as it is, lone surrogates included, as lz-string's output does.
  const parts = chunks.map((chunk, i) =>
    Buffer.from(chunk.buffer, 0, Math.min(written - i * 65536, 65536) * 2).toString('utf16le'),
  );
  return parts.join('');
}
