import type { OrderRecord } from '../orders/order.repository.js';

/** What a segment's holder decided for a waiting order it took into its batch. */
export type Verdict =
  /** Placed in the holder's statement. */
  | { kind: 'placed'; order: OrderRecord }
  /** Refused by the customer's limit on the SKU: the customer may order `remaining` more units. */
  | { kind: 'over-limit'; remaining: number }
  /** Did not fit: the segment holds `available` after the batch (read under its lock); look elsewhere. */
  | { kind: 'short'; segment: number; available: number }
  /** Its Idempotency-Key was used by another request meanwhile: replay that order. */
  | { kind: 'lost-race' }
  /** The batch wrote nothing (its fence was refused, or its lease lost): try again. */
  | { kind: 'retry' }
  /** The batch's statement failed (Postgres away): the order fails the same way. */
  | { kind: 'failed'; error: unknown };

/** An order of this instance waiting for a segment of its SKU, which a holder of one may serve. */
export interface WaitingOrder {
  readonly quantity: number;
  readonly idempotencyKey: string | undefined;
  readonly fingerprint: string | null;
  readonly customerId: string | undefined;
  readonly holdSeconds: number | undefined;
  /**
   * Values no two orders of one batch may share: the Idempotency-Key (the later order will find the first's), and on
   * a limited SKU the customer (each customer's claim is checked once per statement).
   */
  readonly exclusiveBy: readonly string[];
  readonly layoutVersion: number;
  /** Its place in line (ReleaseNotices tickets): batches are decided in this order. */
  readonly ticket: number;
  /** Called, synchronously, when a holder takes the order into its batch. */
  readonly onTaken: () => void;
  readonly verdict: Promise<Verdict>;
}

interface Entry extends WaitingOrder {
  settle(verdict: Verdict): void;
}

/**
 * The orders of this instance waiting for each SKU, in arrival order: flat combining's publication list. A caller that
 * holds a segment's lock takes a batch of them (`take`), decides them in order against the stock it read, writes them
 * in one statement, and settles each with its verdict. Nobody waits for a batch to fill: a batch is whatever queued
 * while others held the segments.
 */
export class OrderQueue {
  private readonly waiting = new Map<string, Entry[]>();

  /** Queues an order that is about to wait; its verdict settles only if a holder takes it. */
  join(sku: string, order: Omit<WaitingOrder, 'verdict'>): WaitingOrder {
    let settle!: (verdict: Verdict) => void;
    const verdict = new Promise<Verdict>((resolve) => (settle = resolve));
    const entry: Entry = { ...order, verdict, settle };
    let line = this.waiting.get(sku);
    if (!line) {
      line = [];
      this.waiting.set(sku, line);
    }
    let index = line.findIndex((e) => e.ticket > entry.ticket);
    if (index < 0) index = line.length;
    line.splice(index, 0, entry);
    return entry;
  }

  /** How many orders wait for the SKU. */
  size(sku: string): number {
    return this.waiting.get(sku)?.length ?? 0;
  }

  /** Leaves the line; false when a holder took the order already (then its verdict is coming). */
  leave(sku: string, order: WaitingOrder): boolean {
    const line = this.waiting.get(sku);
    const index = line?.indexOf(order as Entry) ?? -1;
    if (!line || index < 0) return false;
    line.splice(index, 1);
    if (line.length === 0) this.waiting.delete(sku);
    return true;
  }

  /**
   * Takes up to `max` waiting orders for the layout, oldest first, of at most `available` units each: an order larger
   * than the holder's whole stock stays in line rather than be woken for nothing. Two that share an `exclusiveBy`
   * value never share a batch: the later one stays in line. `inBatch` holds the values of the holder's own order.
   */
  take(sku: string, layoutVersion: number, available: number, max: number, inBatch: Set<string>): Taken[] {
    const line = this.waiting.get(sku);
    if (!line || max <= 0) return [];
    const taken: Taken[] = [];
    for (let i = 0; i < line.length && taken.length < max;) {
      const entry = line[i]!;
      const skip = entry.layoutVersion !== layoutVersion || entry.quantity > available;
      if (skip || entry.exclusiveBy.some((value) => inBatch.has(value))) {
        i++;
        continue;
      }
      for (const value of entry.exclusiveBy) inBatch.add(value);
      line.splice(i, 1);
      entry.onTaken();
      taken.push({ order: entry, settle: entry.settle });
    }
    if (line.length === 0) this.waiting.delete(sku);
    return taken;
  }
}

/** A waiting order a holder took, with the means to tell it the verdict. */
export interface Taken {
  order: WaitingOrder;
  settle(verdict: Verdict): void;
}
