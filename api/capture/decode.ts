// Turning an SDK request into JSON, PostHog's pipeline (spec §8.1): `data` from the query or a form,
// base64, gzip (hinted or sniffed), lz-string. Shared by capture and /flags.
import type { Context } from 'koa';
import LZString from 'lz-string';
import { gunzipSync } from 'node:zlib';
import { ApiError, payloadTooLarge } from '../http/errors.ts';

export const captureError = (detail: string, status = 400) =>
  new ApiError(status, status === 401 ? 'authentication_error' : 'invalid_request', status === 401 ? 'invalid_api_key' : 'invalid_payload', detail);

const STRICT_BASE64 = /^[A-Za-z0-9+/]+={0,2}$/;
const looksBase64 = (text: string) => text.length >= 4 && text.length % 4 === 0 && STRICT_BASE64.test(text.trim());

function compressionHint(value: string | undefined): 'gzip' | 'lz64' | 'base64' | null {
  const hint = (value ?? '').toLowerCase();
  if (hint === 'gzip' || hint === 'gzip-js') return 'gzip';
  if (hint === 'lz64' || hint === 'lz-string') return 'lz64';
  if (hint === 'base64' || hint === 'b64') return 'base64';
  return null;
}

/** Decodes the payload to JSON. `limitBytes` bounds the decompressed size too (413). */
export function decodeSdkPayload(ctx: Context, rawBody: Buffer, limitBytes: number, legacyPath: boolean): unknown {
  const query = ctx.query as Record<string, string | undefined>;
  let payload: Buffer = rawBody;
  let formCompression: string | undefined;
  if (typeof query.data === 'string' && query.data !== '') {
    payload = Buffer.from(query.data, 'utf8');
  } else if ((ctx.get('content-type') || '').split(';')[0].trim().toLowerCase() === 'application/x-www-form-urlencoded') {
    const form = new URLSearchParams(rawBody.toString('utf8'));
    const data = form.get('data');
    if (data === null) throw captureError('request missing data payload');
    formCompression = form.get('compression') ?? undefined;
    payload = Buffer.from(looksBase64(data.replace(/ /g, '+')) ? data.replace(/ /g, '+') : data, 'utf8');
  }
  if (payload.length === 0) throw captureError('request missing data payload');

  const hint = compressionHint(query.compression) ?? compressionHint(formCompression) ?? compressionHint(ctx.get('content-encoding'));
  let text: string;
  try {
    if (hint === 'gzip' || (payload[0] === 0x1f && payload[1] === 0x8b)) {
      const unzipped = gunzipSync(payload, { maxOutputLength: limitBytes });
      text = unzipped.toString('utf8');
    } else if (hint === 'lz64') {
      text = LZString.decompressFromBase64(payload.toString('utf8')) ?? '';
      if (!text) throw captureError('failed to decompress lz-string payload');
    } else {
      text = payload.toString('utf8');
      if (hint === 'base64' || looksBase64(text)) text = Buffer.from(text.trim(), 'base64').toString('utf8');
    }
  } catch (error) {
    if (error instanceof ApiError) throw error;
    if ((error as NodeJS.ErrnoException).code === 'ERR_BUFFER_TOO_LARGE') throw payloadTooLarge(limitBytes);
    throw captureError('failed to decode request body (invalid gzip or encoding)');
  }
  if (Buffer.byteLength(text) > limitBytes) throw payloadTooLarge(limitBytes);
  if (legacyPath && looksBase64(text.trim())) text = Buffer.from(text.trim(), 'base64').toString('utf8');
  try {
    return JSON.parse(text);
  } catch {
    throw captureError('failed to decode request body: invalid JSON');
  }
}
