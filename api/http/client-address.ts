// The client's address, as the guessing throttles count it. With TRUST_PROXY=N (N proxies in front
// of the API, each appending the address it saw to X-Forwarded-For) it is the N-th entry from the
// right, the one the outermost trusted proxy wrote, as Express's `trust proxy` = N picks it: whatever
// a client writes into the header itself stands to the left of it and is never read. With 0 the
// header is ignored and the socket's address is the client's.
import { isIP } from 'node:net';

/** `1.2.3.4`, `1.2.3.4:5678`, `::1`, `[::1]:5678` → the bare address; anything else → null. */
function address(entry: string): string | null {
  let value = entry.trim();
  const bracketed = /^\[([^\]]+)\](?::\d{1,5})?$/.exec(value);
  if (bracketed) value = bracketed[1];
  else if (/^[\d.]+:\d{1,5}$/.test(value)) value = value.slice(0, value.lastIndexOf(':'));
  const family = isIP(value);
  if (family === 0) return null;
  // An IPv4 client seen on an IPv6 socket is the same client as on an IPv4 one.
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(value);
  return mapped ? mapped[1] : family === 6 ? value.toLowerCase() : value;
}

/**
 * The client address of a request: the socket's address, then `trustedHops` entries of
 * `forwardedFor` read from the right (several header lines arrive joined by commas, in order).
 * It stops early at the leftmost entry (fewer entries than hops: that entry was written by the
 * nearest proxy the request passed) and at an entry that is not an address (a proxy writes only
 * addresses, so junk there came from a client): the last address reached is the client's.
 */
export function clientAddress(
  forwardedFor: string | undefined,
  socketAddress: string | undefined,
  trustedHops: number,
) {
  let client = (socketAddress && address(socketAddress)) ?? socketAddress ?? '';
  if (trustedHops === 0 || !forwardedFor) return client;
  const entries = forwardedFor.split(',');
  for (let hop = 1; hop <= trustedHops && hop <= entries.length; hop++) {
    const seen = address(entries[entries.length - hop]);
    if (seen === null) break;
    client = seen;
  }
  return client;
}
