import type { Scope } from '../../api-keys-file.js';

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
