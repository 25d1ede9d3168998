/**
 * Every event type the service announces (docs/events.md). The changes write the order and `sku.*` changes with
 * themselves; the sale window's edges are written when the shared clock passes them (./sale-edges.ts); a waiting line
 * (src/lines) writes its draw, its admissions and its sold-out moment with them, changing no stock; the sequencer
 * derives `sku.low_stock`, `sku.sold_out` and `sku.back_in_stock` from the SKU's available after each event, in the
 * SKU's own order.
 */
export const EVENT_TYPES = [
  'order.placed',
  'order.confirmed',
  'order.cancelled',
  'order.expired',
  'sku.created',
  'sku.restocked',
  'sku.adjusted',
  'sku.counted',
  'sku.resegmented',
  'sku.limit_changed',
  'sku.threshold_changed',
  'sku.sale_opened',
  'sku.sale_closed',
  'sku.low_stock',
  'sku.sold_out',
  'sku.back_in_stock',
  'line.opened',
  'line.admitted',
  'line.sold_out',
  'line.reopened',
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

/** The low-stock threshold in force after an outbox row with this data: set by the SKU's creation and by a threshold change. */
export function thresholdAfter(data: Record<string, unknown> | null, threshold: number | null): number | null {
  const set = (data?.sku ?? data?.threshold) as { lowStockThreshold?: number | null } | undefined;
  return set && set.lowStockThreshold !== undefined ? set.lowStockThreshold : threshold;
}

/**
 * What an event's change of `available` announces besides itself: crossing the low-stock threshold downwards (from
 * above it to at or below it), reaching 0, and coming back from 0 (a SKU created with stock was never out of it).
 */
export function derivedTypes(
  type: EventType,
  before: number,
  after: { available: number; lowStockThreshold: number | null },
): EventType[] {
  const derived: EventType[] = [];
  const threshold = after.lowStockThreshold;
  if (threshold !== null && before > threshold && after.available <= threshold) derived.push('sku.low_stock');
  if (before > 0 && after.available === 0) derived.push('sku.sold_out');
  if (before === 0 && after.available > 0 && type !== 'sku.created') derived.push('sku.back_in_stock');
  return derived;
}
