import type { StockChangeKind } from '../db/schema.js';

/** One change of a SKU's stock, as the answer to an adjustment or a counted set shows it. */
export interface Movement {
  id: string;
  kind: StockChangeKind;
  /** Signed units added to the SKU's stock (negative: removed). */
  quantity: number;
  reason: string;
  /** The credential that made it: `key:<name>`, `customer:<id>`, or `anonymous` (no credential). */
  actor: string | null;
  note: string | null;
  reference: string | null;
  orderId: string | null;
  /** The SKU's available right after it. */
  availableAfter: number | null;
  at: string;
}
