import type { Request, RequestHandler, Response } from 'express';
import { ipKeyGenerator } from 'express-rate-limit';
import { SCOPES, type Scope } from '../../api-keys-file.js';
import type { Config } from '../../config.js';
import { AppError } from '../../errors.js';
import { customerId as customerIdSchema } from '../schemas.js';
import { CustomerTokenVerifier } from './customer-tokens.js';
import type { Principal } from './principal.js';
import { METRICS_TOKEN_SCOPES, ServiceKeys } from './service-keys.js';

/**
 * What is open when:
 * - `open`: nothing configured. The service listens on loopback only and every route is open (a local default).
 * - `tokens`: only ADMIN_TOKEN and/or METRICS_TOKEN. What those tokens guard needs them; placing, reading an order
 *   by id, confirming and cancelling a reservation stay open, as before service keys existed.
 * - `closed`: API_KEYS_FILE or a customer issuer configured. Every route but health, the API document and the
 *   dashboard's static page needs a credential.
 */
export type AccessMode = 'open' | 'tokens' | 'closed';

/** The customer scopes: a customer token places, reads, confirms and cancels, for its own customer only. */
const CUSTOMER_SCOPES: ReadonlySet<Scope> = new Set(['orders:place', 'orders:read', 'orders:manage']);

const BEARER = /^Bearer +(\S+)\s*$/i;
const PRINCIPAL = Symbol('principal');

interface RouteAccess {
  /** Open to every caller in `tokens` mode (and `open` mode), as the route was before service keys. */
  openUntilKeys?: boolean;
}

/**
 * Who may do what: turns the Authorization header into a Principal once per request (`authenticate`), and guards
 * routes by scope (`require`). In `open` mode nothing runs per request.
 */
export class Access {
  readonly mode: AccessMode;
  /** The principal of a request without a credential. */
  private readonly anonymous: Principal;
  private readonly keys: ServiceKeys;
  private readonly customers: CustomerTokenVerifier | undefined;
  private readonly customerCancelConfirmed: boolean;

  constructor(config: Config) {
    this.keys = new ServiceKeys(config.apiKeys ?? [], config.adminToken, config.metricsToken);
    this.customers = config.customerTokens && new CustomerTokenVerifier(config.customerTokens);
    this.customerCancelConfirmed = config.customerCancelConfirmed;
    this.mode =
      config.apiKeys !== undefined || config.customerTokens !== undefined
        ? 'closed'
        : this.keys.size > 0
          ? 'tokens'
          : 'open';
    // With only METRICS_TOKEN, the scopes no token guards stay open, as they were.
    const guarded = new Set<Scope>(
      config.adminToken !== undefined ? SCOPES : config.metricsToken !== undefined ? METRICS_TOKEN_SCOPES : [],
    );
    const open = this.mode === 'closed' ? [] : SCOPES.filter((scope) => !guarded.has(scope));
    this.anonymous = Object.freeze({ kind: 'open', scopes: new Set(open) });
  }

  /** The middleware that decides each request's principal; undefined in `open` mode, where there is nothing to decide. */
  authenticate(): RequestHandler | undefined {
    if (this.mode === 'open') return undefined;
    return async (req, res, next) => {
      const header = req.headers.authorization;
      if (header === undefined) return next();
      const match = BEARER.exec(header);
      // Another scheme (Basic, …) is no bearer credential: the caller is anonymous, and told to send one if it must.
      if (!match) return next();
      (res.locals as Record<symbol, Principal>)[PRINCIPAL] = await this.principalOfToken(match[1]!);
      next();
    };
  }

  private async principalOfToken(token: string): Promise<Principal> {
    const service = this.keys.match(token);
    if (service) return service;
    // A JWT is three base64url parts; anything else is a key that matched none.
    if (this.customers && /^[\w-]+\.[\w-]+\.[\w-]*$/.test(token)) {
      const customerId = await this.customers.customerOf(token);
      return { kind: 'customer', scopes: CUSTOMER_SCOPES, customerId };
    }
    throw new AppError('invalid_token', 'the bearer credential is not valid');
  }

  principalOf(res: Response): Principal {
    return (res.locals as Record<symbol, Principal | undefined>)[PRINCIPAL] ?? this.anonymous;
  }

  /**
   * Lets through callers holding one of `scopes` (`'credential'`: any valid credential); refuses the others, 401 or
   * 403 (see `refuse`).
   */
  require(scopes: readonly Scope[] | 'credential', route: RouteAccess = {}): RequestHandler {
    if (!this.guards(route)) return (_req, _res, next) => next();
    return (_req, res, next) => {
      const principal = this.principalOf(res);
      const allowed = scopes === 'credential' ? principal.kind !== 'open' : scopes.some((s) => principal.scopes.has(s));
      if (!allowed) throw this.refuse(principal, scopes === 'credential' ? [] : scopes, 'this route');
      next();
    };
  }

  /** Whether a route's `require` checks anything in this mode: a route it lets everyone through needs no middleware. */
  guards(route: RouteAccess = {}): boolean {
    return !(this.mode === 'open' || (this.mode === 'tokens' && route.openUntilKeys));
  }

  /** 401 to a caller without a credential; 403 `forbidden`, naming the scope, to one whose credential lacks it. */
  refuse(principal: Principal, scopes: readonly Scope[], what: string): AppError {
    const needed = scopes.length === 0 ? 'a credential' : `a credential with ${scopes.join(' or ')}`;
    if (principal.kind === 'open') {
      return new AppError('unauthorized', `${what} needs ${needed}: send Authorization: Bearer <key or token>`);
    }
    const detail =
      principal.kind === 'customer'
        ? `${what} needs a service key with ${scopes.join(' or ')}; a customer token may not`
        : `${what} needs ${scopes.join(' or ')}, which service key '${principal.name}' does not hold`;
    return new AppError('forbidden', detail, { scope: scopes.join(' ') });
  }

  /** Whether the caller may cancel a confirmed order (a refund): `orders:manage`, or a customer where policy says so. */
  mayCancelConfirmed(principal: Principal): boolean {
    if (principal.kind === 'customer') return this.customerCancelConfirmed;
    return principal.scopes.has('orders:manage');
  }

  /**
   * Who is calling, as caps on what one caller holds count it: a customer token's customer, a service key, or for a
   * caller without a credential its address (IPv6 by /56).
   */
  callerKey(req: Request, res: Response): string {
    const principal = this.principalOf(res);
    if (principal.kind === 'customer') return `customer:${principal.customerId}`;
    if (principal.kind === 'service') return `key:${principal.name}`;
    return ipKeyGenerator(req.ip ?? '', 56);
  }

  /**
   * What the order rate limit counts by: a customer token's customer; for a service key, the customer it places for
   * (or the key, placing for none); for a caller without a credential, its address (IPv6 by /56), since anyone can
   * write any customerId into a body.
   */
  rateLimitKey(req: Request, res: Response): string {
    const principal = this.principalOf(res);
    if (principal.kind === 'customer') return `customer:${principal.customerId}`;
    if (principal.kind === 'service') {
      const asked = (req.body as { customerId?: unknown } | undefined)?.customerId;
      return customerIdSchema.safeParse(asked).success ? `customer:${asked as string}` : `key:${principal.name}`;
    }
    return ipKeyGenerator(req.ip ?? '', 56);
  }
}
