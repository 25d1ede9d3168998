import type { Scope } from '../../api-keys-file.js';
import { AppError } from '../../errors.js';

/**
 * Who is calling, decided once per request from its Authorization header: `open`, a caller without a credential
 * (holding the scopes the configuration leaves open), `service`, a service key, or `customer`, a customer token acting
 * for `customerId` only.
 */
export interface Principal {
  readonly kind: 'open' | 'service' | 'customer';
  readonly scopes: ReadonlySet<Scope>;
  /** The customer a customer token acts for. */
  readonly customerId?: string;
  /** The service key's name. */
  readonly name?: string;
}

/** The customer the caller may act for only, or undefined for callers not bound to one customer. */
export const boundCustomer = (principal: Principal): string | undefined =>
  principal.kind === 'customer' ? principal.customerId : undefined;

/**
 * The customer a request acts for: the one named, which a customer token may only name as its own (a service key
 * with the scope acts for any), or the token's own when none is named.
 */
export function actingFor(principal: Principal, named: string | undefined, scope: Scope): string | undefined {
  const bound = boundCustomer(principal);
  if (bound === undefined) return named;
  if (named !== undefined && named !== bound) {
    const detail = `acting for another customer needs a service key with ${scope}; this token acts for '${bound}' only`;
    throw new AppError('forbidden', detail, { scope });
  }
  return bound;
}
