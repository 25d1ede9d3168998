import { hasEnded } from '../inventory/sale-window.js';
import type { LineRow, TicketState } from './line.repository.js';

/**
 * What a ticket holder is told:
 * - `waiting`: in line; `position` is the ticket's place in line order (null in the pre-line until the draw), `ahead`
 *   the tickets in front of it still waiting, `unitsAhead` the units they asked for. Both only fall as the line
 *   advances: the line's estimate is how much of it stands in front, never a time that could rise again.
 * - `admitted`: a reservation was made for the ticket; confirm it (POST /orders/:id/confirm) before `expiresAt`.
 * - `purchased`, `expired`, `cancelled`: what became of that reservation.
 * - `sold_out`: no unit can come back to the line any more (nothing available, nothing reserved), or the units that
 *   could never cover the ticket's quantity.
 * - `closed`: the sale window ended before the ticket's turn came.
 * - `refused`: the reservation was refused for a reason waiting cannot cure (`refusal`: e.g. `purchase_limit`).
 */
export type TicketStatus =
  'waiting' | 'admitted' | 'purchased' | 'expired' | 'cancelled' | 'sold_out' | 'closed' | 'refused';

export interface TicketView {
  ticketId: string;
  sku: string;
  customerId: string;
  quantity: number;
  status: TicketStatus;
  /** Joined before the opening: its place comes from the draw. */
  preLine: boolean;
  position: number | null;
  ahead: number | null;
  unitsAhead: number | null;
  /** The reservation an admission made. */
  reservation: { orderId: string; expiresAt: string | null } | null;
  refusal: string | null;
  joinedAt: string;
}

/** Statuses after which nothing about the ticket changes. */
export const FINAL_STATUSES: ReadonlySet<TicketStatus> = new Set([
  'purchased',
  'expired',
  'cancelled',
  'sold_out',
  'closed',
  'refused',
]);

/** The ticket as its holder sees it at `now` (the shared clock). */
export function ticketView({ ticket, line, order }: TicketState, now: number): TicketView {
  const status = statusOf({ ticket, line, order }, now);
  const inLine = status === 'waiting' && ticket.number !== null;
  return {
    ticketId: ticket.id,
    sku: line.sku,
    customerId: ticket.customerId,
    quantity: ticket.quantity,
    status,
    preLine: ticket.preLine,
    position: ticket.number,
    ahead: inLine ? Math.max(0, ticket.number! - line.admittedThrough - 1) : null,
    unitsAhead: inLine ? Math.max(0, ticket.unitsBefore! - line.unitsAdmitted) : null,
    reservation:
      ticket.orderId === null
        ? null
        : { orderId: ticket.orderId, expiresAt: order?.expiresAt ? order.expiresAt.toISOString() : null },
    refusal: ticket.status === 'refused' && ticket.refusal !== 'out_of_stock' ? ticket.refusal : null,
    joinedAt: ticket.joinedAt.toISOString(),
  };
}

function statusOf({ ticket, line, order }: TicketState, now: number): TicketStatus {
  switch (ticket.status) {
    case 'refused':
      return ticket.refusal === 'out_of_stock' ? 'sold_out' : 'refused';
    case 'admitted':
      if (!order) return 'admitted';
      if (order.status === 'reserved') return order.due ? 'expired' : 'admitted';
      return order.status === 'confirmed' ? 'purchased' : order.status;
    case 'admitting':
      // Let through, its reservation on its way: first in line.
      return 'waiting';
    case 'waiting':
      if (line.soldOutAt !== null) return 'sold_out';
      return hasEnded(line, now) ? 'closed' : 'waiting';
  }
}

/** The line as GET /skus/:sku/line answers it. */
export interface LineView {
  sku: string;
  /** `forming`: before the opening, joins form the pre-line; `open`: admitting in line order; `sold_out`; `closed`. */
  status: 'forming' | 'open' | 'sold_out' | 'closed';
  capacity: number;
  holdSeconds: number;
  tickets: number;
  /** Tickets not let through yet. */
  waiting: number;
  /** Tickets let through so far, in line order. */
  admittedThrough: number;
  /** The draw of the pre-line: its size, when it was drawn and the seed that orders it (see docs/design.md). */
  draw: { preLineTickets: number; drawnAt: string | null; seed: string | null };
  soldOutAt: string | null;
}

export function lineView(line: LineRow, now: number): LineView {
  const drawn = line.drawnAt !== null;
  return {
    sku: line.sku,
    status: line.soldOutAt !== null ? 'sold_out' : hasEnded(line, now) ? 'closed' : drawn ? 'open' : 'forming',
    capacity: line.capacity,
    holdSeconds: line.holdSeconds,
    tickets: line.tickets,
    waiting: drawn ? line.numbersGiven - line.admittedThrough : line.preLineTickets,
    admittedThrough: line.admittedThrough,
    draw: {
      preLineTickets: line.preLineTickets,
      drawnAt: line.drawnAt?.toISOString() ?? null,
      seed: line.drawSeed,
    },
    soldOutAt: line.soldOutAt?.toISOString() ?? null,
  };
}
