// Decompression bombs for the capture tests: lz-string (base64) and gzip payloads that are small on
// the wire and enormous once decoded.
import { gzipSync } from 'node:zlib';

const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';

/** Packs values into lz-string's base64 bit stream (each value least significant bit first, 6 bits a char). */
class BitWriter {
  private chars: string[] = [];
  private value = 0;
  private position = 0;

  write(value: number, bits: number): void {
    for (let i = 0; i < bits; i++) {
      this.value = (this.value << 1) | (value & 1);
      value >>= 1;
      if (++this.position === 6) {
        this.chars.push(ALPHABET[this.value]);
        this.value = 0;
        this.position = 0;
      }
    }
  }

  finish(): string {
    if (this.position > 0) this.write(0, 6 - this.position);
    const text = this.chars.join('');
    return text + '='.repeat((4 - (text.length % 4)) % 4);
  }
}

/**
 * An lz64 payload of about `sizeChars` characters that decodes to a run of 'a's whose length grows
 * with the square of the payload: every code is the newest dictionary entry, one character longer
 * than the one before (LZW's "KwKwK" case). 70 KB decodes to ~4·10⁸ characters, 261 KB to ~6·10⁹.
 */
export function lz64Bomb(sizeChars: number): string {
  const out = new BitWriter();
  out.write(0, 2); // an 8-bit literal follows
  out.write('a'.charCodeAt(0), 8);
  let dictSize = 4;
  let numBits = 3;
  let enlargeIn = 4;
  let bitsLeft = sizeChars * 6 - 10 - 32;
  while (bitsLeft > numBits) {
    out.write(dictSize, numBits);
    bitsLeft -= numBits;
    dictSize++;
    if (--enlargeIn === 0) {
      enlargeIn = 2 ** numBits;
      numBits++;
    }
  }
  out.write(2, numBits); // end of stream
  return out.finish();
}

/** A gzip body of `decodedBytes` zero bytes (about 1/1000 of that on the wire). */
export const gzipBomb = (decodedBytes: number) => gzipSync(Buffer.alloc(decodedBytes), { level: 9 });

/**
 * The same bomb with the size in its gzip trailer set to 0, so that only decoding it can show how
 * large it is (an honest trailer lets the API refuse it unread).
 */
export function gzipBombHidingSize(decodedBytes: number): Buffer {
  const bomb = gzipBomb(decodedBytes);
  bomb.writeUInt32LE(0, bomb.length - 4);
  return bomb;
}
