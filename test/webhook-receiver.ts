// A webhook receiver on 127.0.0.1 for tests, and the signature check README shows a receiver.
import { createHmac } from 'node:crypto';
import { createServer, type IncomingHttpHeaders, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

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
  const id = received.headers['x-webhook-id'];
  const first = calls.filter((c) => c.headers['x-webhook-id'] === id).length === 1;
  received.answered = first ? 500 : 200;
  res.writeHead(received.answered, { 'content-type': 'text/plain' }).end(first ? 'try again' : 'ok');
};

/** The receiver's check of a call, as README shows it. */
export function verified(secret: string, headers: IncomingHttpHeaders, body: string): boolean {
  const timestamp = String(headers['x-webhook-timestamp']);
  const expected = `v1=${createHmac('sha256', secret).update(`${timestamp}.${body}`).digest('hex')}`;
  return headers['x-webhook-signature'] === expected && Math.abs(Date.now() / 1000 - Number(timestamp)) < 300;
}
