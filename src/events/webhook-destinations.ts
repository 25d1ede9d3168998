import { lookup as dnsLookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import { networkInterfaces } from 'node:os';
import ipaddr from 'ipaddr.js';

/**
 * Where webhooks may be sent: public unicast addresses only, unless WEBHOOK_ALLOW_PRIVATE_DESTINATIONS opens the
 * others (development, tests). A webhook URL is chosen by whoever holds `webhooks:manage`, and the service then
 * connects to it from inside the network, so every other address would let that caller reach what the network keeps
 * in: Redis, Postgres, cloud metadata, the service's own admin routes.
 *
 * The check runs where the connection is made (`DestinationGuard.resolve`, used by the delivery client's connector):
 * the host is resolved at each new connection, refused when any of its addresses is refused, and the connection goes
 * to the address that was checked, so a name that resolves elsewhere a moment later (DNS rebinding) gains nothing.
 * Saving a URL runs the same check once, for a clear answer early.
 */

/** Why an address is refused: a name from the ranges ipaddr.js knows, or the service's own address. */
export type RefusedRange = string;

/**
 * An IPv4 address an IPv6 address carries, and the name of that form: a packet to the IPv6 address reaches, or is
 * translated to, the IPv4 one, so the destination is judged by it. IPv4-mapped and -translated (`::ffff:a.b.c.d`,
 * `::ffff:0:a.b.c.d`), IPv4-compatible (`::a.b.c.d`, deprecated but still routed by some stacks), NAT64 (`64:ff9b::/96`),
 * 6to4 (`2002:AABB:CCDD::`) and ISATAP interface ids (`…:0:5efe:a.b.c.d`, `…:200:5efe:a.b.c.d`). Teredo and the
 * local-use NAT64 prefix (`64:ff9b:1::/48`, where the operator chooses where the address sits) are refused whole.
 */
function embeddedIPv4(v6: ipaddr.IPv6): { form: string; v4: ipaddr.IPv4 } | undefined {
  const parts = v6.parts;
  const at = (offset: number) =>
    new ipaddr.IPv4([parts[offset]! >> 8, parts[offset]! & 0xff, parts[offset + 1]! >> 8, parts[offset + 1]! & 0xff]);
  const range = v6.range();
  if (range === 'ipv4Mapped' || range === 'rfc6145') return { form: range, v4: at(6) };
  if (range === 'rfc6052' && parts[2] === 0) return { form: range, v4: at(6) };
  if (range === '6to4') return { form: range, v4: at(1) };
  if (range !== 'unicast') return undefined;
  if (parts.slice(0, 6).every((part) => part === 0)) return { form: 'ipv4Compatible', v4: at(6) };
  if ((parts[4]! & ~0x0300) === 0 && parts[5] === 0x5efe) return { form: 'ISATAP', v4: at(6) };
  return undefined;
}

/**
 * The range that makes `address` unfit as a destination, or undefined for a public unicast address. `own` holds the
 * addresses this machine answers on (the service's own listening addresses among them).
 */
export function refusedRange(address: string, own: ReadonlySet<string> = ownAddresses()): RefusedRange | undefined {
  let parsed: ipaddr.IPv4 | ipaddr.IPv6;
  try {
    // `parse` accepts the shorthands (127.1, 2130706433, 0x7f000001) as the address they denote.
    parsed = ipaddr.parse(address);
  } catch {
    return 'not an address';
  }
  if (parsed.kind() === 'ipv6') {
    const v6 = parsed as ipaddr.IPv6;
    if (v6.zoneId !== undefined) return 'zoned (link-scoped)';
    const embedded = embeddedIPv4(v6);
    if (embedded !== undefined) {
      const inner = refusedRange(embedded.v4.toString(), own);
      return inner === undefined ? undefined : `${embedded.form} form of ${inner}`;
    }
    const range = v6.range();
    if (range !== 'unicast') return range;
  } else if (parsed.range() !== 'unicast') {
    return parsed.range();
  }
  if (own.has(parsed.toNormalizedString())) return "the service's own address";
  return undefined;
}

/** Every address this machine's interfaces carry, normalized; the service listens on one of them, or on all. */
export function ownAddresses(): Set<string> {
  const own = new Set<string>();
  for (const list of Object.values(networkInterfaces())) {
    for (const { address } of list ?? []) {
      try {
        own.add(ipaddr.parse(address.split('%')[0]!).toNormalizedString());
      } catch {
        // an interface address ipaddr.js cannot read (none on Linux): nothing to add
      }
    }
  }
  return own;
}

/** A destination refused: `rule` names what its address is. */
export class DestinationRefused extends Error {
  override readonly name = 'DestinationRefused';
  constructor(
    readonly host: string,
    readonly address: string,
    readonly rule: RefusedRange,
  ) {
    super(
      host === address
        ? `${address} is ${article(rule)} address`
        : `${host} resolves to ${address}, ${article(rule)} address`,
    );
  }
}

const article = (rule: string) =>
  /^[aeiou]/i.test(rule) ? `an ${rule}` : rule.startsWith('the ') ? rule : `a ${rule}`;

export type Lookup = (host: string) => Promise<{ address: string }[]>;

const systemLookup: Lookup = (host) => dnsLookup(host, { all: true, verbatim: true });

export class DestinationGuard {
  constructor(
    /** WEBHOOK_ALLOW_PRIVATE_DESTINATIONS: every address allowed (development and tests only). */
    readonly allowPrivate: boolean,
    private readonly lookup: Lookup = systemLookup,
  ) {}

  /**
   * The address to connect to for `host` (a name or an address, IPv6 without brackets): the first it resolves to,
   * once every one of them passed. Throws DestinationRefused otherwise, and the lookup's own error when it fails.
   */
  async resolve(host: string): Promise<string> {
    const bare = host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
    const addresses = isIP(bare) ? [bare] : (await this.lookup(bare)).map((a) => a.address);
    if (addresses.length === 0) throw Object.assign(new Error(`${host} has no address`), { code: 'ENOTFOUND' });
    if (!this.allowPrivate) {
      const own = ownAddresses();
      for (const address of addresses) {
        const rule = refusedRange(address, own);
        if (rule !== undefined) throw new DestinationRefused(bare, address, rule);
      }
    }
    return addresses[0]!;
  }

  /**
   * The reason to refuse saving `url`, or undefined. The URL parser has already turned numeric shorthands into the
   * address they denote. A name that does not resolve now is accepted: it is checked again at each delivery.
   */
  async refusalOf(url: string): Promise<DestinationRefused | undefined> {
    if (this.allowPrivate) return undefined;
    const { hostname } = new URL(url);
    try {
      await this.resolve(hostname);
      return undefined;
    } catch (error) {
      if (error instanceof DestinationRefused) return error;
      return undefined;
    }
  }
}
