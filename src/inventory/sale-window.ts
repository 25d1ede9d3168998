import type { AppError } from '../errors.js';
import { notOnSale } from './refusals.js';

/** When a SKU may be ordered, in milliseconds since the epoch by the shared clock; null leaves that side open. */
export interface SaleWindow {
  /** Orders open at this instant (inclusive). */
  readonly saleStartsAt: number | null;
  /** Orders close at this instant (exclusive). */
  readonly saleEndsAt: number | null;
}

/** Whether the SKU is on sale at `now` (shared clock). */
export function isOnSale(window: SaleWindow, now: number): boolean {
  return (
    (window.saleStartsAt === null || now >= window.saleStartsAt) &&
    (window.saleEndsAt === null || now < window.saleEndsAt)
  );
}

/**
 * The refusal of an order for `sku` at `now`, or undefined while it is on sale. Before the opening it says when, with
 * Retry-After: the whole seconds until then, rounded up, so a client that waits that long is not refused again.
 */
export function outsideWindow(sku: string, window: SaleWindow, now: number): AppError | undefined {
  if (window.saleStartsAt !== null && now < window.saleStartsAt) {
    return notOnSale(
      sku,
      { opensAt: new Date(window.saleStartsAt).toISOString() },
      Math.ceil((window.saleStartsAt - now) / 1000),
    );
  }
  if (window.saleEndsAt !== null && now >= window.saleEndsAt) {
    return notOnSale(sku, { closedAt: new Date(window.saleEndsAt).toISOString() });
  }
  return undefined;
}
