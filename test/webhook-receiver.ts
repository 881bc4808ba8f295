// A webhook receiver on 127.0.0.1 for tests, and the signature check README shows a receiver.
import { createServer, type IncomingHttpHeaders, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook } from 'standardwebhooks';

export interface Received {
  headers: IncomingHttpHeaders;
  body: string;
  answered: number;
}

/** An HTTP receiver on 127.0.0.1; `answer` decides each call's response. */
export async function startReceiver(answer: (call: Received, res: ServerResponse, calls: Received[]) => void) {
  const calls: Received[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const received: Received = { headers: req.headers, body: Buffer.concat(chunks).toString('utf8'), answered: 0 };
      calls.push(received);
      answer(received, res, calls);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`;
  return {
    url,
    calls,
    close: () => {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(resolve));
    },
  };
}

/** Each delivery's first call fails with 500; every later call succeeds. */
export const failsOnce = (received: Received, res: ServerResponse, calls: Received[]) => {
  const id = received.headers['webhook-id'];
  const first = calls.filter((c) => c.headers['webhook-id'] === id).length === 1;
  received.answered = first ? 500 : 200;
  res.writeHead(received.answered, { 'content-type': 'text/plain' }).end(first ? 'try again' : 'ok');
};

/**
 * The receiver's check of a call, as README shows it: the Standard Webhooks library's verify (signature
 * and timestamp). `raw`: a secret of the customer's own that is not base64 is the key as it is.
 */
export function verified(secret: string, headers: IncomingHttpHeaders, body: string, raw = false): boolean {
  try {
    new Webhook(secret, raw ? { format: 'raw' } : undefined).verify(body, headers as Record<string, string>);
    return true;
  } catch {
    return false;
  }
}
