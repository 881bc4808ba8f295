// clientAddress on its own: the forms proxies write (ports, brackets, IPv4 on an IPv6 socket).
import { describe, expect, it } from 'vitest';
import { clientAddress } from '../../../api/http/client-address.ts';
import { addressGroup } from '../../../api/http/throttle.ts';

describe('clientAddress', () => {
  it('reads N entries from the right and nothing left of them', () => {
    expect(clientAddress('6.6.6.6, 1.1.1.1, 2.2.2.2', '10.0.0.1', 0)).toBe('10.0.0.1');
    expect(clientAddress('6.6.6.6, 1.1.1.1, 2.2.2.2', '10.0.0.1', 1)).toBe('2.2.2.2');
    expect(clientAddress('6.6.6.6, 1.1.1.1, 2.2.2.2', '10.0.0.1', 2)).toBe('1.1.1.1');
    expect(clientAddress('1.1.1.1', '10.0.0.1', 5)).toBe('1.1.1.1');
    expect(clientAddress(undefined, '10.0.0.1', 1)).toBe('10.0.0.1');
  });

  it('stops at an entry that is not an address', () => {
    expect(clientAddress('6.6.6.6, unknown, 2.2.2.2', '10.0.0.1', 3)).toBe('2.2.2.2');
    expect(clientAddress('2.2.2.2,', '10.0.0.1', 1)).toBe('10.0.0.1');
    expect(clientAddress('999.1.1.1', '10.0.0.1', 1)).toBe('10.0.0.1');
  });

  it('drops ports and brackets and reads an IPv4-mapped IPv6 address as IPv4', () => {
    expect(clientAddress('1.2.3.4:5678', '10.0.0.1', 1)).toBe('1.2.3.4');
    expect(clientAddress('[2001:DB8::1]:443', '10.0.0.1', 1)).toBe('2001:db8::1');
    expect(clientAddress('2001:db8::2', '10.0.0.1', 1)).toBe('2001:db8::2');
    expect(clientAddress(undefined, '::ffff:127.0.0.1', 1)).toBe('127.0.0.1');
  });
});

describe('addressGroup', () => {
  it('counts an IPv6 /64 as one client and leaves IPv4 alone', () => {
    expect(addressGroup('203.0.113.9')).toBe('203.0.113.9');
    expect(addressGroup('2001:db8:0:1::1')).toBe(addressGroup('2001:db8:0:1:ffff:1:2:3'));
    expect(addressGroup('2001:db8:0:1::1')).toBe('2001:db8:0:1::/64');
    expect(addressGroup('2001:db8:0:2::1')).not.toBe(addressGroup('2001:db8:0:1::1'));
    expect(addressGroup('::1')).toBe('0:0:0:0::/64');
    expect(addressGroup('2001:DB8:00AB::')).toBe('2001:db8:ab:0::/64');
  });
});
