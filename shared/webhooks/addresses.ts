// Where a webhook may post. Its URL is the customer's, so by default the worker refuses any host that
// resolves to an address inside our own network: loopback, private (RFC 1918, fc00::/7), link-local
// (169.254/16 with the cloud metadata service at 169.254.169.254, fe80::/10) or unspecified. Checked when
// a webhook is created or changed, and again at each delivery, where the connection goes to the very
// address that was checked (a name that resolves elsewhere a moment later cannot redirect it).
// WEBHOOK_ALLOW_PRIVATE_URLS=true lifts the rule (receivers on the operator's own network, tests).
import { lookup } from 'node:dns/promises';
import { BlockList, isIP } from 'node:net';

const refused = new BlockList();
refused.addSubnet('0.0.0.0', 8, 'ipv4'); // "this network", 0.0.0.0 unspecified
refused.addSubnet('127.0.0.0', 8, 'ipv4');
refused.addSubnet('10.0.0.0', 8, 'ipv4');
refused.addSubnet('172.16.0.0', 12, 'ipv4');
refused.addSubnet('192.168.0.0', 16, 'ipv4');
refused.addSubnet('169.254.0.0', 16, 'ipv4');
refused.addAddress('::', 'ipv6');
refused.addAddress('::1', 'ipv6');
refused.addSubnet('fc00::', 7, 'ipv6');
refused.addSubnet('fe80::', 10, 'ipv6');

/** Whether `address` (an IP literal) is one a webhook may not reach by default (IPv4-mapped IPv6 included). */
export function isPrivateAddress(address: string): boolean {
  const family = isIP(address);
  if (family === 0) return false;
  return refused.check(address, family === 4 ? 'ipv4' : 'ipv6');
}

export class PrivateAddressError extends Error {}

export interface ResolvedAddress {
  address: string;
  family: 4 | 6;
}

/** A URL's host name without the brackets of an IPv6 literal. */
export const hostOf = (url: URL) => url.hostname.replace(/^\[(.*)\]$/, '$1');

/**
 * Every address `host` resolves to (itself for an IP literal). Throws PrivateAddressError when any is
 * private and `allowPrivate` is false: a name with one private record is refused whole.
 */
export async function resolveWebhookHost(host: string, allowPrivate: boolean): Promise<ResolvedAddress[]> {
  const literal = isIP(host);
  const addresses: ResolvedAddress[] = literal
    ? [{ address: host, family: literal as 4 | 6 }]
    : (await lookup(host, { all: true, verbatim: true })).map((a) => ({
        address: a.address,
        family: a.family as 4 | 6,
      }));
  const inside = addresses.find((a) => isPrivateAddress(a.address));
  if (inside && !allowPrivate)
    throw new PrivateAddressError(
      `${host} resolves to ${inside.address}, a loopback, private, link-local or unspecified address: webhooks may not post inside this network.`,
    );
  return addresses;
}

/**
 * The check at creation or change: refuses a URL whose host resolves to a private address. A host that
 * does not resolve (yet) is accepted; each delivery checks again.
 */
export async function checkWebhookHost(url: string, allowPrivate: boolean): Promise<void> {
  if (allowPrivate) return;
  try {
    await resolveWebhookHost(hostOf(new URL(url)), false);
  } catch (error) {
    if (error instanceof PrivateAddressError) throw error;
  }
}
