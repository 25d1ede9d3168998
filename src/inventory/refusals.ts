import { AppError } from '../errors.js';

/**
 * The ways work under the segment locks ends without applying anything, in one place for the order flow and the
 * stock admin: the answers a client gets (busy, out of stock, over a customer limit), and the internal signal that a
 * fenced write was refused.
 */

/** Every segment the request needed stayed locked for its whole wait budget (503, retryable). */
export function lockBusy(waitedMs: number): AppError {
  return new AppError('lock_busy', `every segment stayed locked for ${waitedMs} ms`, {}, 1);
}

/** Not enough stock: only ever answered from stock read under the segment locks. `sku` names the SKU that fell short. */
export function outOfStock(sku: string, quantity: number, available: number): AppError {
  return new AppError('out_of_stock', `SKU '${sku}' has ${available} unit(s) left, ${quantity} ordered`, {
    sku,
    available,
  });
}

/**
 * The SKU's sale window is not open: before it, `opensAt` and the seconds until then (Retry-After); after it,
 * `closedAt`. Refused before any lock or query, like a SKU known to be sold out.
 */
export function notOnSale(
  sku: string,
  when: { opensAt: string } | { closedAt: string },
  retryAfterSeconds?: number,
): AppError {
  const detail =
    'opensAt' in when
      ? `SKU '${sku}' goes on sale at ${when.opensAt}`
      : `SKU '${sku}' was on sale until ${when.closedAt}`;
  return new AppError('not_on_sale', detail, { sku, ...when }, retryAfterSeconds);
}

/** The SKU limits units per customer, and the order named none. */
export function customerRequired(sku: string): AppError {
  return new AppError('customer_required', `SKU '${sku}' limits units per customer: the order needs a customerId`);
}

/** The order would take the customer's live orders of the SKU past its limit. */
export function purchaseLimit(sku: string, remaining: number): AppError {
  return new AppError(
    'purchase_limit',
    `SKU '${sku}' limits units per customer: this customer may order ${remaining} more`,
    { sku, remaining },
  );
}

/**
 * A fenced write touched fewer rows than it meant to: a lock it relied on was lost (expired, taken over). Thrown
 * inside a transaction to roll the rest back; the caller starts over with fresh locks. Never reaches a client.
 */
export class FencedOutError extends Error {
  constructor(readonly segments: readonly number[]) {
    super(`fenced write refused on segment(s) ${segments.join(',')}`);
  }
}
