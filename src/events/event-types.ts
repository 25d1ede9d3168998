/**
 * Every event type the service announces (docs/events.md). The changes write the first eight (and
 * `sku.threshold_changed`) with themselves; the sale window's edges are written when the shared clock passes them
 * (./sale-edges.ts); the sequencer derives the last three from the SKU's available after each event, in the SKU's own
 * order.
 */
export const EVENT_TYPES = [
  'order.placed',
  'order.confirmed',
  'order.cancelled',
  'order.expired',
  'sku.created',
  'sku.restocked',
  'sku.resegmented',
  'sku.limit_changed',
  'sku.threshold_changed',
  'sku.sale_opened',
  'sku.sale_closed',
  'sku.low_stock',
  'sku.sold_out',
  'sku.back_in_stock',
] as const;

export type EventType = (typeof EVENT_TYPES)[number];

/** A SKU's books after an event: `available + reserved + sold` is its stock. */
export interface SkuTotals {
  available: number;
  reserved: number;
  sold: number;
}

/** An event as the feed, the stream and webhooks show it. `id` is also the cursor to read on after it. */
export interface StockEvent {
  id: string;
  type: EventType;
  sku: string;
  sequence: number;
  occurredAt: string;
  data: Record<string, unknown> & SkuTotals;
}
