// Where a webhook may post. Its URL is the customer's, so by default the worker refuses any host that
// resolves to an address that is not plain public unicast: loopback, private (RFC 1918, fc00::/7),
// link-local (169.254/16 with the cloud metadata service at 169.254.169.254, fe80::/10), shared
// (100.64/10), benchmarking, documentation, multicast, broadcast, reserved, unspecified and every other
// IANA special-purpose range, as ipaddr.js classifies them. An IPv6 address that carries an IPv4 one
// (IPv4-mapped, IPv4-compatible ::a.b.c.d, NAT64 64:ff9b::/96, 6to4 2002::/16) is judged by that IPv4.
// Checked when a webhook is created or changed, and again at each delivery, where the connection goes
// to the very address that was checked (a name that resolves elsewhere a moment later cannot redirect it).
// WEBHOOK_ALLOW_PRIVATE_URLS=true lifts the rule (receivers on the operator's own network, tests).
import { lookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import ipaddr from 'ipaddr.js';

const NAT64_PREFIX = ipaddr.IPv6.parse('64:ff9b::').toByteArray().slice(0, 12);

/** The IPv4 address an IPv6 one carries (IPv4-mapped or -compatible, NAT64, 6to4), or null. */
function carriedIPv4(address: ipaddr.IPv6): ipaddr.IPv4 | null {
  const bytes = address.toByteArray();
  const range = address.range();
  // The last 32 bits of ::ffff:0:0/96, ::ffff:0:0:0/96 (RFC 6145), 64:ff9b::/96 (NAT64, RFC 6052; its
  // local-use /48 is no unicast of its own) and ::/96 (IPv4-compatible; :: and ::1 are themselves).
  if (
    range === 'ipv4Mapped' ||
    range === 'rfc6145' ||
    NAT64_PREFIX.every((b, i) => b === bytes[i]) ||
    (range === 'unicast' && bytes.slice(0, 12).every((b) => b === 0))
  )
    return ipaddr.IPv4.parse(bytes.slice(12).join('.'));
  // 6to4, 2002:AABB:CCDD::/48: the 32 bits after the prefix.
  if (range === '6to4') return ipaddr.IPv4.parse(bytes.slice(2, 6).join('.'));
  return null;
}

/**
 * The class of `address` (an IP literal) as ipaddr.js names it (`unicast`: public; `loopback`,
 * `private`, `carrierGradeNat`, `rfc6052`...), an IPv6 one carrying an IPv4 address judged by that IPv4;
 * null when it is no IP literal.
 */
export function addressRange(address: string): string | null {
  if (isIP(address) === 0) return null;
  const parsed = ipaddr.parse(address);
  const judged = parsed.kind() === 'ipv6' ? (carriedIPv4(parsed as ipaddr.IPv6) ?? parsed) : parsed;
  return judged.range();
}

/** Whether `address` (an IP literal) is one a webhook may not reach by default: anything but public unicast. */
export function isPrivateAddress(address: string): boolean {
  const range = addressRange(address);
  return range !== null && range !== 'unicast';
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
      `${host} resolves to ${inside.address} (${addressRange(inside.address)}), not a public unicast address: webhooks may not post inside this network or to special-purpose addresses.`,
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
