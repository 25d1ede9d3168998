import { History, readAnswer } from './history.js';
import type { CustomerAction } from './line-drop.js';

// A drop's history for the linearizability checker, from what its customers saw (epoch milliseconds throughout:
// every process here shares the machine's clock). The service, not a client, places each admission's reservation,
// so its call is bounded by what the customers can know: not before its order id's time (a UUIDv7 stamped with
// the milliseconds it was made, before its statement ran) and not after the first read of a ticket that named it.

/** An admission's reservation, as its ticket first named it. */
export interface SeenReservation {
  orderId: string;
  quantity: number;
  /** The hold's end, from the ticket (the service's clock: this machine's); null once it was confirmed. */
  expiresAt: number | null;
  /** When the read that first named it was answered. */
  seenAt: number;
}

/** One `GET /skus/:sku` during the drop. */
export interface SkuRead {
  sentAt: number;
  receivedAt: number;
  status: number;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- a JSON answer, read as the model reads it
  body: any;
}

/** The milliseconds a UUIDv7 was made at: its first 48 bits. */
export const uuidTime = (id: string) => parseInt(id.replace(/-/g, '').slice(0, 12), 16);

/**
 * The SKU's history: each admission placed (a reservation of its ticket's units) between its id's time and its first
 * sighting; each one's expiry, indeterminate from its `expiresAt` on (the sweep may end it, or a confirm or cancel
 * come first); every confirm and cancel a customer sent, with what it answered; every read of the SKU.
 */
export function lineHistory(
  sku: string,
  stock: number,
  seen: readonly SeenReservation[],
  actions: readonly CustomerAction[],
  reads: readonly SkuRead[],
): History {
  const history = new History();
  history.created(sku, stock);
  for (const r of seen) {
    history.add({
      sku,
      call: { kind: 'place', quantity: r.quantity, hold: true },
      answer: { kind: 'placed', orderId: r.orderId },
      // The id's millisecond is truncated: the order was made within it.
      invokedAt: uuidTime(r.orderId),
      returnedAt: r.seenAt,
    });
    // First seen confirmed, it has no hold left to run out.
    if (r.expiresAt === null) continue;
    const expire = { kind: 'expire', orderId: r.orderId, quantity: r.quantity } as const;
    history.add({ sku, call: expire, answer: { kind: 'unknown' }, invokedAt: r.expiresAt, returnedAt: Infinity });
  }
  const quantities = new Map(seen.map((r) => [r.orderId, r.quantity]));
  for (const a of actions) {
    const quantity = quantities.get(a.orderId);
    if (quantity === undefined) throw new Error(`order ${a.orderId} acted on but never seen on its ticket`);
    const definite = (a.status === 200 || a.status === 409) && a.orderStatus !== undefined;
    history.add({
      sku,
      call: { kind: a.behaviour, orderId: a.orderId, quantity },
      answer: definite ? { kind: 'status', status: a.orderStatus! } : { kind: 'unknown' },
      invokedAt: a.sentAt,
      returnedAt: definite ? a.receivedAt : Infinity,
    });
  }
  for (const read of reads) {
    const answer = readAnswer(read.status, read.body);
    if (answer.kind !== 'read') continue;
    history.add({ sku, call: { kind: 'read' }, answer, invokedAt: read.sentAt, returnedAt: read.receivedAt });
  }
  return history;
}
