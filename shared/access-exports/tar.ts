// A .tar.gz written as a stream to a file: POSIX ustar headers (512-byte blocks), each member's data
// copied from the gzip file it was compressed into as it was written. Nothing is held in memory
// beyond the streams' buffers. No tar library is installed; the format is small and written here with care:
// sizes past ustar's 11 octal digits (8 GiB) use the base-256 form GNU tar and bsdtar read.
import { once } from 'node:events';
import { createReadStream, createWriteStream, type WriteStream } from 'node:fs';
import { finished } from 'node:stream/promises';
import { constants, gzipSync } from 'node:zlib';

const BLOCK = 512;

/** An octal field of `width` bytes: digits, zero-padded, then NUL. */
function octal(value: number, width: number): Buffer {
  return Buffer.from(`${value.toString(8).padStart(width - 1, '0')}\0`, 'ascii');
}

/** The size field: octal up to 8 GiB − 1, else base-256 (first byte 0x80, big-endian). */
function sizeField(size: number): Buffer {
  if (size < 8 ** 11) return octal(size, 12);
  const field = Buffer.alloc(12);
  field[0] = 0x80;
  let rest = BigInt(size);
  for (let i = 11; i > 0; i--) {
    field[i] = Number(rest & 0xffn);
    rest >>= 8n;
  }
  return field;
}

/** One member's ustar header. `name` must be at most 100 bytes (this module's names are short). */
export function ustarHeader(name: string, size: number, mtime: Date, type: 'file' | 'directory'): Buffer {
  const header = Buffer.alloc(BLOCK);
  const nameBytes = Buffer.from(name, 'utf8');
  if (nameBytes.length > 100) throw new Error(`tar member name longer than 100 bytes: ${name}`);
  nameBytes.copy(header, 0);
  octal(type === 'directory' ? 0o755 : 0o644, 8).copy(header, 100);
  octal(0, 8).copy(header, 108); // uid
  octal(0, 8).copy(header, 116); // gid
  sizeField(type === 'directory' ? 0 : size).copy(header, 124);
  octal(Math.floor(mtime.getTime() / 1000), 12).copy(header, 136);
  header.fill(0x20, 148, 156); // the checksum counts its own field as spaces
  header.write(type === 'directory' ? '5' : '0', 156, 'ascii');
  header.write('ustar\0', 257, 'ascii');
  header.write('00', 263, 'ascii');
  let sum = 0;
  for (const byte of header) sum += byte;
  Buffer.from(`${sum.toString(8).padStart(6, '0')}\0 `, 'ascii').copy(header, 148);
  return header;
}

/** Small data as one gzip member (headers, padding, the end marker, the manifest's files). */
export const gzipMember = (data: Buffer) => gzipSync(data, { level: constants.Z_BEST_SPEED });

/**
 * A .tar.gz written to `path` as a series of gzip members (RFC 1952 §2.2: a gzip file is one or more
 * members, and gunzip, `tar -xzf` and zlib read them as one stream): each tar header and padding is a
 * member of its own, and each file's data is copied in as the member it was already compressed into
 * while it was written (see build.ts), so no byte is compressed twice and the data is never reread
 * uncompressed. The archive therefore decompresses to exactly the ustar stream of its members.
 */
export class TarGzWriter {
  readonly #out: WriteStream;
  readonly #done: Promise<void>;

  constructor(path: string) {
    this.#out = createWriteStream(path, { flags: 'wx' });
    this.#done = finished(this.#out);
    // A failed write surfaces in finish() (or the member being written); never as an unhandled rejection.
    this.#done.catch(() => undefined);
  }

  async #write(chunk: Buffer): Promise<void> {
    if (!this.#out.write(chunk)) await Promise.race([once(this.#out, 'drain'), this.#done]);
  }

  async addDirectory(name: string, mtime: Date): Promise<void> {
    await this.#write(gzipMember(ustarHeader(name.endsWith('/') ? name : `${name}/`, 0, mtime, 'directory')));
  }

  /** Adds member `name` of `size` bytes (uncompressed) whose data is the gzip file at `compressed`. */
  async addCompressedFile(name: string, compressed: string, size: number, mtime: Date): Promise<void> {
    await this.#write(gzipMember(ustarHeader(name, size, mtime, 'file')));
    for await (const chunk of createReadStream(compressed, { highWaterMark: 1 << 20 }))
      await this.#write(chunk as Buffer);
    const pad = (BLOCK - (size % BLOCK)) % BLOCK;
    if (pad) await this.#write(gzipMember(Buffer.alloc(pad)));
  }

  /** The end-of-archive marker (two zero blocks); resolves once the file is written. */
  async finish(): Promise<void> {
    await this.#write(gzipMember(Buffer.alloc(BLOCK * 2)));
    this.#out.end();
    await this.#done;
  }

  /** Stops writing (after a failure); the caller removes the file. */
  abort(): void {
    this.#out.destroy();
  }
}
