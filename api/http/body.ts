import type { Context } from 'koa';
import { payloadTooLarge } from './errors.ts';

/**
 * Reads the raw request body, refusing (413) as soon as it passes `limitBytes` so an oversize
 * upload is never buffered whole. Content-Length is checked first when the client sent one.
 */
export async function readRawBody(ctx: Context, limitBytes: number): Promise<Buffer> {
  const declared = Number(ctx.get('content-length') || NaN);
  if (Number.isFinite(declared) && declared > limitBytes) throw payloadTooLarge(limitBytes);
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of ctx.req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > limitBytes) {
      ctx.req.resume(); // drain the rest so the connection can answer
      throw payloadTooLarge(limitBytes);
    }
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}
