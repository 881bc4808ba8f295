// Turning an SDK request into JSON, PostHog's pipeline (its Rust capture service's router and payload decoding, rust/capture): `data` from the query or a form,
// base64, gzip (hinted or sniffed), lz-string. Shared by capture and /flags. Bounded and asynchronous:
// a decompression bomb is refused with 413 without stalling other requests.
import type { Context } from 'koa';
import { isAscii } from 'node:buffer';
import { StringDecoder } from 'node:string_decoder';
import { createGunzip } from 'node:zlib';
import { ApiError, payloadTooLarge } from '../http/errors.ts';
import { DecodeCapExceeded, decodeBudgetFor, type Reserve } from './budget.ts';
import { JsonTooDeep, parseJsonYielding } from './json.ts';
import { decompressLz64, Lz64TooLarge } from './lz64.ts';

export const captureError = (detail: string, status = 400) =>
  new ApiError(
    status,
    status === 401 ? 'authentication_error' : 'invalid_request',
    status === 401 ? 'invalid_api_key' : 'invalid_payload',
    detail,
  );

const STRICT_BASE64 = /^[A-Za-z0-9+/]+={0,2}$/;
const looksBase64 = (text: string) => {
  const trimmed = text.trim();
  return trimmed.length >= 4 && trimmed.length % 4 === 0 && STRICT_BASE64.test(trimmed);
};

function compressionHint(value: string | undefined): 'gzip' | 'lz64' | 'base64' | null {
  const hint = (value ?? '').toLowerCase();
  if (hint === 'gzip' || hint === 'gzip-js') return 'gzip';
  if (hint === 'lz64' || hint === 'lz-string') return 'lz64';
  if (hint === 'base64' || hint === 'b64') return 'base64';
  return null;
}

/**
 * Gunzips on the thread pool, reserving each chunk of output from the budget before keeping it, and
 * stops as soon as the output passes `capBytes`. The output stays in buffers until it is whole, and
 * those buffers are freed as soon as the text is made or the decode fails, not at some later garbage
 * collection (which an idle process may not run for a long time).
 */
/** The most deflate can compress: 1032 bytes of output per byte of input (a run of one byte). */
const MAX_DEFLATE_RATIO = 1032;

async function gunzipWithin(payload: Buffer, capBytes: number, reserve: Reserve): Promise<string> {
  // A gzip stream ends with the decoded size (mod 2³²) of its last member, which zlib checks at the end:
  // a body declaring more than the cap is refused without inflating it. A false, smaller size only
  // skips this: the inflate below is bounded all the same. Only a gzip body (its magic bytes) has a
  // trailer, and only a size deflate can reach (at most 1032:1) can be one: a truncated stream ends in
  // compressed bytes, and is invalid gzip (400) once inflated, not too large.
  const isGzip = payload[0] === 0x1f && payload[1] === 0x8b;
  const declared = payload.length >= 18 ? payload.readUInt32LE(payload.length - 4) : 0;
  if (isGzip && declared > capBytes && declared <= payload.length * MAX_DEFLATE_RATIO) throw new DecodeCapExceeded();
  return new Promise((resolve, reject) => {
    const inflate = createGunzip({ chunkSize: GZIP_CHUNK_BYTES });
    const chunks: Buffer[] = [];
    let total = 0;
    const stop = (error: unknown) => {
      inflate.destroy();
      freeChunks(chunks);
      reject(error);
    };
    inflate.on('data', (chunk: Buffer) => {
      total += chunk.length;
      if (total > capBytes) return stop(new DecodeCapExceeded());
      try {
        reserve(chunk.length);
      } catch (error) {
        return stop(error);
      }
      chunks.push(chunk);
    });
    inflate.on('error', () => stop(captureError('failed to decode request body (invalid gzip or encoding)')));
    inflate.on('end', () => {
      const decoder = new StringDecoder('utf8');
      const text = chunks.map((chunk) => decoder.write(chunk)).join('') + decoder.end();
      freeChunks(chunks);
      resolve(text);
    });
    inflate.end(payload);
  });
}

/** 256 KB: a 20 MB body in 80 trips to the thread pool rather than 320. */
const GZIP_CHUNK_BYTES = 256 * 1024;

/**
 * Frees the inflate's output buffers now. Only whole ones: zlib moves to a new buffer once one is full
 * and never writes the full one again, while a partly filled one may still be its current buffer.
 */
function freeChunks(chunks: Buffer[]): void {
  for (const chunk of chunks)
    if (chunk.byteOffset === 0 && chunk.length === GZIP_CHUNK_BYTES && chunk.buffer.byteLength === GZIP_CHUNK_BYTES)
      (chunk.buffer as ArrayBuffer).transfer(0);
  chunks.length = 0;
}

/** lz-string base64, bounded: UTF-16 units never outnumber the UTF-8 bytes they encode. */
async function lz64Within(payload: Buffer, capBytes: number, reserve: Reserve): Promise<string> {
  let text: string | null;
  try {
    // Base64 is ASCII: read from the bytes, with no string of the body (a full collection's worth
    // of them in a flood of bombs). Anything else is read as the text lz-string would be given.
    text = await decompressLz64(isAscii(payload) ? payload : payload.toString('utf8'), capBytes, reserve);
  } catch (error) {
    if (error instanceof Lz64TooLarge) throw new DecodeCapExceeded();
    throw error;
  }
  if (!text) throw captureError('failed to decompress lz-string payload');
  return text;
}

/**
 * Decodes the payload to JSON. Every step is bounded by `limitBytes` of output (413 past it) while
 * it decodes: gzip and lz-string stop as soon as they pass it; base64, form fields and the query's
 * `data` only ever shrink what was read, and the raw body was read within the limit.
 */
export async function decodeSdkPayload(
  ctx: Context,
  rawBody: Buffer,
  limitBytes: number,
  legacyPath: boolean,
): Promise<unknown> {
  const query = ctx.query as Record<string, string | undefined>;
  let payload: Buffer = rawBody;
  let formCompression: string | undefined;
  if (typeof query.data === 'string' && query.data !== '') {
    payload = Buffer.from(query.data, 'utf8');
  } else if (
    (ctx.get('content-type') || '').split(';')[0].trim().toLowerCase() === 'application/x-www-form-urlencoded'
  ) {
    const form = new URLSearchParams(rawBody.toString('utf8'));
    const data = form.get('data');
    if (data === null) throw captureError('request missing data payload');
    formCompression = form.get('compression') ?? undefined;
    payload = Buffer.from(looksBase64(data.replace(/ /g, '+')) ? data.replace(/ /g, '+') : data, 'utf8');
  }
  if (payload.length === 0) throw captureError('request missing data payload');
  if (payload.length > limitBytes) throw payloadTooLarge(limitBytes);

  const hint =
    compressionHint(query.compression) ??
    compressionHint(formCompression) ??
    compressionHint(ctx.get('content-encoding'));
  try {
    return await decodeBudgetFor(ctx.deps.config).run(
      limitBytes,
      (capBytes, reserve) => decodeText(payload, hint, legacyPath, capBytes, reserve),
      rawBody.length,
    );
  } catch (error) {
    if (error instanceof DecodeCapExceeded) throw payloadTooLarge(limitBytes);
    throw error;
  }
}

/** A JSON body no bigger than this, sent as it is, is parsed at once (plainSmallJson). */
const PLAIN_SMALL_BYTES = 8 * 1024;

/**
 * The fast path for what SDKs send /flags: a small JSON object as the body, with no `data` field, form,
 * compression or base64. Parsed at once, without a turn in the decode budget: its output is its input,
 * already read and smaller than any allowance. undefined for any other body, or one that does not
 * parse: decodeSdkPayload then decodes it (and words its error) as it does every body.
 */
export function plainSmallJson(ctx: Context, rawBody: Buffer, limitBytes: number): unknown {
  // '{' first: not gzip's magic bytes, not base64 (nor, trimmed, the legacy paths' base64).
  if (rawBody.length === 0 || rawBody.length > Math.min(PLAIN_SMALL_BYTES, limitBytes) || rawBody[0] !== 0x7b)
    return undefined;
  const query = ctx.query as Record<string, string | undefined>;
  if (typeof query.data === 'string' && query.data !== '') return undefined;
  if (compressionHint(query.compression) ?? compressionHint(ctx.get('content-encoding'))) return undefined;
  if ((ctx.get('content-type') || '').split(';')[0].trim().toLowerCase() === 'application/x-www-form-urlencoded')
    return undefined;
  const text = rawBody.toString('utf8');
  // Invalid UTF-8 grows as it is replaced: such a body goes the whole way, with its caps.
  if (Buffer.byteLength(text) !== rawBody.length) return undefined;
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** The payload's text, decoded within `capBytes` (DecodeCapExceeded past it), parsed. */
async function decodeText(
  payload: Buffer,
  hint: ReturnType<typeof compressionHint>,
  legacyPath: boolean,
  capBytes: number,
  reserve: Reserve,
): Promise<unknown> {
  let text: string;
  if (hint === 'gzip' || (payload[0] === 0x1f && payload[1] === 0x8b)) {
    text = await gunzipWithin(payload, capBytes, reserve);
  } else if (hint === 'lz64') {
    text = await lz64Within(payload, capBytes, reserve);
  } else {
    // Base64 and plain text only shrink what was read.
    if (payload.length > capBytes) throw new DecodeCapExceeded();
    reserve(payload.length);
    text = payload.toString('utf8');
    if (hint === 'base64' || looksBase64(text)) text = Buffer.from(text.trim(), 'base64').toString('utf8');
  }
  if (Buffer.byteLength(text) > capBytes) throw new DecodeCapExceeded();
  if (legacyPath && looksBase64(text.trim())) text = Buffer.from(text.trim(), 'base64').toString('utf8');
  try {
    return await parseJsonYielding(text);
  } catch (error) {
    if (error instanceof JsonTooDeep) throw captureError(`failed to decode request body: ${error.message}`);
    throw captureError('failed to decode request body: invalid JSON');
  }
}
