import type { StockChangeKind } from '../db/schema.js';

/**
 * What a movement of a SKU's stock was: a change logged in `stock_additions` (create, restock, adjustment, counted
 * set), an order taking units (`order`), or an order's units going back (`cancel`, `expiry`).
 */
export type MovementKind = StockChangeKind | 'order' | 'cancel' | 'expiry';

export const MOVEMENT_KINDS = [
  'create',
  'restock',
  'adjustment',
  'count',
  'order',
  'cancel',
  'expiry',
] as const satisfies readonly MovementKind[];

/** One change of a SKU's stock, as the answer to an adjustment or a counted set and the SKU's history show it. */
export interface Movement {
  id: string;
  kind: MovementKind;
  /** Signed units added to what is available (negative: taken or removed). */
  quantity: number;
  /**
   * An adjustment's or a count's reason; a create's or a restock's kind; a cancel's `cancelled`, or `refund` when the
   * order had been confirmed; an expiry's `expired`; null for an order.
   */
  reason: string | null;
  /** The credential that made it: `key:<name>`, `customer:<id>`, or `anonymous` (no credential). */
  actor: string | null;
  note: string | null;
  reference: string | null;
  orderId: string | null;
  /** The SKU's available right after it, where the ledger knows it. */
  availableAfter: number | null;
  at: string;
}
