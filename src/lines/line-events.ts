import type { Transaction } from 'kysely';
import type { Database } from '../db/schema.js';
import type { Outbox } from '../events/outbox.js';
import type { LineRow, TicketRow } from './line.repository.js';

type Trx = Transaction<Database>;

/**
 * The line's events (docs/events.md), each written through the outbox in the transaction of the change it announces,
 * so it commits or rolls back with it. None moves stock: an admission's units are the reservation's own
 * `order.placed`, written with that order.
 */
export class LineEvents {
  constructor(private readonly outbox: Outbox) {}

  /** `line.opened`: the pre-line was drawn; the seed lets anyone repeat the draw. */
  opened(trx: Trx, line: LineRow): Promise<void> {
    const draw = { preLineTickets: line.preLineTickets, seed: line.drawSeed, drawnAt: line.drawnAt?.toISOString() };
    return this.outbox.write(trx, [{ skuId: line.skuId, type: 'line.opened', data: { draw } }]);
  }

  /** One `line.admitted` per ticket whose reservation was recorded, in line order. */
  admitted(trx: Trx, skuId: number, tickets: readonly TicketRow[]): Promise<void> {
    const inLineOrder = [...tickets].sort((a, b) => a.number! - b.number!);
    return this.outbox.write(
      trx,
      inLineOrder.map((ticket) => ({
        skuId,
        type: 'line.admitted',
        data: {
          admission: {
            ticketId: ticket.id,
            customerId: ticket.customerId,
            orderId: ticket.orderId,
            quantity: ticket.quantity,
            position: ticket.number,
          },
        },
      })),
    );
  }

  /** `line.sold_out`: no unit can come back to the line; every ticket still waiting reads sold out from now. */
  soldOut(trx: Trx, line: LineRow, at: Date): Promise<void> {
    const { tickets, admittedThrough } = line;
    // Tickets numbered and not let through: each is told sold out.
    const waiting = line.numbersGiven - admittedThrough;
    const data = { line: { soldOutAt: at.toISOString(), tickets, admittedThrough, waiting } };
    return this.outbox.write(trx, [{ skuId: line.skuId, type: 'line.sold_out', data }]);
  }

  /** `line.reopened`: units came back to a sold-out line's SKU; the tickets it told sold out stay so. */
  reopened(trx: Trx, line: LineRow, at: Date, toldSoldOut: number): Promise<void> {
    const data = { line: { reopenedAt: at.toISOString(), tickets: line.tickets, toldSoldOut } };
    return this.outbox.write(trx, [{ skuId: line.skuId, type: 'line.reopened', data }]);
  }
}
