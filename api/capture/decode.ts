// Turning an SDK request into JSON, PostHog's pipeline (its Rust capture service's router and payload decoding, rust/capture): `data` from the query or a form,
// base64, gzip (hinted or sniffed), lz-string. Shared by capture and /flags. Bounded and asynchronous:
// a decompression bomb is refused with 413 without stalling other requests.
import type { Context } from 'koa';
import { promisify } from 'node:util';
import { gunzip } from 'node:zlib';
import { ApiError, payloadTooLarge } from '../http/errors.ts';
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

const gunzipAsync = promisify(gunzip);

/**
 * Gunzips on the thread pool, never past `limitBytes` of output. Chunks of 64 KB rather than 16 KB:
 * a quarter of the round trips to the event loop for a large body.
 */
async function gunzipWithin(payload: Buffer, limitBytes: number): Promise<Buffer> {
  try {
    return await gunzipAsync(payload, { maxOutputLength: limitBytes, chunkSize: 64 * 1024 });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ERR_BUFFER_TOO_LARGE') throw payloadTooLarge(limitBytes);
    throw captureError('failed to decode request body (invalid gzip or encoding)');
  }
}

/** lz-string base64, bounded: UTF-16 units never outnumber the UTF-8 bytes they encode. */
async function lz64Within(payload: Buffer, limitBytes: number): Promise<string> {
  let text: string | null;
  try {
    text = await decompressLz64(payload.toString('utf8'), limitBytes);
  } catch (error) {
    if (error instanceof Lz64TooLarge) throw payloadTooLarge(limitBytes);
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
  let text: string;
  if (hint === 'gzip' || (payload[0] === 0x1f && payload[1] === 0x8b)) {
    text = (await gunzipWithin(payload, limitBytes)).toString('utf8');
  } else if (hint === 'lz64') {
    text = await lz64Within(payload, limitBytes);
  } else {
    text = payload.toString('utf8');
    if (hint === 'base64' || looksBase64(text)) text = Buffer.from(text.trim(), 'base64').toString('utf8');
  }
  if (Buffer.byteLength(text) > limitBytes) throw payloadTooLarge(limitBytes);
  if (legacyPath && looksBase64(text.trim())) text = Buffer.from(text.trim(), 'base64').toString('utf8');
  try {
    return await parseJsonYielding(text);
  } catch (error) {
    if (error instanceof JsonTooDeep) throw captureError(`failed to decode request body: ${error.message}`);
    throw captureError('failed to decode request body: invalid JSON');
  }
}
