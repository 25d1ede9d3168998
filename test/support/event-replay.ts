import { expect } from 'vitest';

/** A SKU's totals, as the events and the SKU view carry them. */
export interface Totals {
  available: number;
  reserved: number;
  sold: number;
}

/**
 * Replays one SKU's events in order from zero, as a consumer would: each change applied from its own details, each
 * event's totals checked against the replay so far. Checks the sequence counts from `first` without a gap. Answers the
 * totals after the last event.
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- feed events, checked field by field
export function replayTotals(events: any[], start: Totals = { available: 0, reserved: 0, sold: 0 }, first = 1): Totals {
  const t = { ...start };
  events.forEach((event, i) => {
    expect(event.sequence, `sequence of ${event.type} #${i}`).toBe(first + i);
    const q = event.data.order?.quantity ?? 0;
    switch (event.type) {
      case 'sku.created':
        t.available += event.data.sku.stock;
        break;
      case 'sku.restocked':
        t.available += event.data.restock.quantity;
        break;
      case 'order.placed':
        t.available -= q;
        if (event.data.order.status === 'reserved') t.reserved += q;
        else t.sold += q;
        break;
      case 'order.confirmed':
        t.reserved -= q;
        t.sold += q;
        break;
      case 'order.cancelled':
      case 'order.expired':
        t.available += q;
        if (event.data.order.previousStatus === 'confirmed') t.sold -= q;
        else t.reserved -= q;
        break;
    }
    expect(
      { available: event.data.available, reserved: event.data.reserved, sold: event.data.sold },
      `totals after ${event.type} #${event.sequence}`,
    ).toEqual(t);
  });
  return t;
}
