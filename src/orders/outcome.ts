import { AppError, type ErrorCode, isDependencyFailure } from '../errors.js';
import type { SaleWindow } from '../inventory/sale-window.js';
import { openSegments, type SkuEntry } from '../inventory/sku-directory.js';
import type { OrderRecord } from './order.repository.js';

/**
 * An order's fate, in the words every layer of the order path uses, from the batch that decides it to the HTTP answer
 * and the metrics' `outcome` label: `placed` (`replayed` when an Idempotency-Key's earlier order answers), or refused
 * with one of the error catalogue's stable codes (src/errors.ts). Each refusal is decided in one place:
 * - `not_on_sale`, `customer_required`, and `out_of_stock` for a SKU whose every segment was already read empty under
 *   its lock: `refusalBeforeLocks`, on arrival and again before each batch, with no lock and no query;
 * - `out_of_stock` from the stock read under the segment locks: `decideBatch` (./batch-plan.ts);
 * - `purchase_limit`: by the customer's holdings, claimed in the order's own transaction (./order-writes.ts);
 * - `lock_busy`: when the order's wait budget runs out in line (`OrderBatcher.reviewPending`);
 * - `line_required`: an order for a SKU sold through its waiting line, unless it is the line's own admission
 *   (`OrderPlacement.placeOnce`).
 */
export type Refusal =
  'not_on_sale' | 'customer_required' | 'out_of_stock' | 'purchase_limit' | 'lock_busy' | 'line_required';
export type OrderOutcome = 'placed' | 'replayed' | Refusal;

/** A refusal as the client receives it: a problem document with one of the refusal codes. */
export type Refused = AppError & { readonly code: Refusal };

/** An order answered with its order: placed now, or `replayed` for an Idempotency-Key already used. */
export interface PlacedOrder {
  order: OrderRecord;
  replayed: boolean;
}

/**
 * How the batch ends an order it took. `key_taken`: another request placed an order under the same Idempotency-Key
 * first, and the order is answered with that one (`replayed`). Failures (Postgres away) are not endings: they reject.
 */
export type Ending =
  { outcome: 'placed'; order: OrderRecord } | { outcome: Refusal; problem: Refused } | { outcome: 'key_taken' };

export function refused(problem: Refused): Ending {
  return { outcome: problem.code, problem };
}

/** The outcome an answer is counted under: the order's fate, or the code of whatever else failed it. */
export function outcomeOf(answer: { placed: PlacedOrder } | { error: unknown }): OrderOutcome | ErrorCode {
  if ('placed' in answer) return answer.placed.replayed ? 'replayed' : 'placed';
  const { error } = answer;
  if (error instanceof AppError) return error.code;
  return isDependencyFailure(error) ? 'dependency_unavailable' : 'internal';
}

/**
 * The refusal an order meets without any lock or query, from what the instance knows of its SKUs at `now` (shared
 * clock), or undefined: a SKU outside its sale window, a limited SKU and no customer, a SKU whose every segment was
 * read empty under its lock (a stale entry's empty marks are not trusted).
 */
export function refusalBeforeLocks(
  lines: readonly { entry: SkuEntry; quantity: number }[],
  customerId: string | null,
  now: number,
): Refused | undefined {
  for (const { entry } of lines) {
    const closed = outsideWindow(entry.sku, entry, now);
    if (closed) return closed;
  }
  const limited = lines.find(({ entry }) => entry.maxPerCustomer !== null);
  if (limited && customerId === null) return customerRequired(limited.entry.sku);
  const soldOut = lines.find(({ entry }) => !entry.stale && openSegments(entry).length === 0);
  return soldOut && outOfStock(soldOut.entry.sku, soldOut.quantity, 0);
}

/** The SKU's units go to its line's tickets, in line order, and to nobody else. */
export function lineRequired(sku: string): Refused {
  return refusal('line_required', `SKU '${sku}' is sold through its line: join it with POST /skus/${sku}/line`, {
    sku,
  });
}

/** Every segment the request needed stayed locked for its whole wait budget (503, retryable). */
export function lockBusy(waitedMs: number): Refused {
  return refusal('lock_busy', `every segment stayed locked for ${waitedMs} ms`, {}, 1);
}

/** Not enough stock, as read under the segment locks (now or earlier). `sku` names the SKU that fell short. */
export function outOfStock(sku: string, quantity: number, available: number): Refused {
  return refusal('out_of_stock', `SKU '${sku}' has ${available} unit(s) left, ${quantity} ordered`, {
    sku,
    available,
  });
}

/**
 * The SKU's sale window is not open: before it, `opensAt` and the seconds until then (Retry-After); after it,
 * `closedAt`. Refused before any lock or query, like a SKU known to be sold out.
 */
function notOnSale(sku: string, when: { opensAt: string } | { closedAt: string }, retryAfterSeconds?: number): Refused {
  const detail =
    'opensAt' in when
      ? `SKU '${sku}' goes on sale at ${when.opensAt}`
      : `SKU '${sku}' was on sale until ${when.closedAt}`;
  return refusal('not_on_sale', detail, { sku, ...when }, retryAfterSeconds);
}

/** The SKU limits units per customer, and the order named none. */
function customerRequired(sku: string): Refused {
  return refusal('customer_required', `SKU '${sku}' limits units per customer: the order needs a customerId`);
}

/** The order would take the customer's live orders of the SKU past its limit. */
export function purchaseLimit(sku: string, remaining: number): Refused {
  return refusal(
    'purchase_limit',
    `SKU '${sku}' limits units per customer: this customer may order ${remaining} more`,
    { sku, remaining },
  );
}

/**
 * The refusal of an order for `sku` at `now`, or undefined while it is on sale. Before the opening it says when, with
 * Retry-After: the whole seconds until then, rounded up, so a client that waits that long is not refused again.
 */
function outsideWindow(sku: string, window: SaleWindow, now: number): Refused | undefined {
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

function refusal(
  code: Refusal,
  detail: string,
  extensions: Record<string, unknown> = {},
  retryAfterSeconds?: number,
): Refused {
  return new AppError(code, detail, extensions, retryAfterSeconds) as Refused;
}
