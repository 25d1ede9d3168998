import type { Db } from '../db/database.js';
import { WriteCombiner } from '../db/write-combiner.js';
import { AppError } from '../errors.js';
import type { SharedClock } from '../inventory/shared-clock.js';
import type { SkuDirectory } from '../inventory/sku-directory.js';
import type { LineEvents } from './line-events.js';
import { drawPreLine, giveTickets, type LineRow, lockLine, type TicketRow } from './line.repository.js';
import { lineClosed, lineFull, lineNotFound } from './line-refusals.js';
import { hasEnded, hasOpened } from '../inventory/sale-window.js';

/** Most joins one statement serves. */
const MAX_JOIN_BATCH = 500;

interface Join {
  skuId: number;
  sku: string;
  customerId: string;
  quantity: number;
}

/**
 * A join's answer: the customer's ticket, new or the one it already had, with the line as the join found it; or why
 * it was refused.
 */
type Joined = { ticket: TicketRow; line: LineRow; created: boolean } | { refused: AppError };

/**
 * Joining a SKU's line. One ticket per customer per line: joining again answers the ticket the customer has. Joins
 * that arrive while a statement runs wait for the next one (flat combining, as orders do), and each SKU's joins of a
 * batch are written in one transaction under the line's lock, so a burst of joins costs a commit per batch, not per
 * customer, and the line's numbers are committed in the order they were given.
 */
export class LineJoins {
  private readonly joins = new WriteCombiner<Join, Joined>((joins) => this.write(joins), MAX_JOIN_BATCH);

  constructor(
    private readonly db: Db,
    private readonly directory: SkuDirectory,
    private readonly clock: SharedClock,
    private readonly events: LineEvents,
  ) {}

  /** The customer's ticket for the SKU's line; `created` when this join made it. */
  async join(
    sku: string,
    customerId: string,
    quantity: number,
  ): Promise<{ ticket: TicketRow; line: LineRow; created: boolean }> {
    const entry = await this.directory.get(sku);
    if (!entry.lined) throw lineNotFound(sku);
    if (entry.maxPerCustomer !== null && quantity > entry.maxPerCustomer) {
      throw new AppError('purchase_limit', `SKU '${sku}' limits units per customer to ${entry.maxPerCustomer}`, {
        sku,
        remaining: entry.maxPerCustomer,
      });
    }
    const joined = await this.joins.run({ skuId: entry.id, sku, customerId, quantity });
    if ('refused' in joined) throw joined.refused;
    return joined;
  }

  private async write(joins: Join[]): Promise<Joined[]> {
    const answers = new Map<Join, Joined>();
    const bySku = new Map<number, Join[]>();
    for (const join of joins) bySku.set(join.skuId, [...(bySku.get(join.skuId) ?? []), join]);
    for (const [skuId, ofSku] of bySku) {
      for (const [join, joined] of await this.writeOne(skuId, ofSku)) answers.set(join, joined);
    }
    return joins.map((join) => answers.get(join)!);
  }

  /**
   * One SKU's joins, under its line's lock. Customers with a ticket get theirs; the others get new tickets while the
   * line has room. A join that reaches the line after the opening, before anyone drew the pre-line, draws it first:
   * every ticket given after the opening comes after the whole pre-line.
   */
  private writeOne(skuId: number, joins: Join[]): Promise<Map<Join, Joined>> {
    const now = this.clock.now();
    return this.db.transaction().execute(async (trx) => {
      const locked = await lockLine(trx, skuId);
      if (!locked) return new Map(joins.map((join) => [join, { refused: lineNotFound(join.sku) }]));
      let line = locked;
      const closed = line.soldOutAt !== null || hasEnded(line, now);
      const room = closed ? 0 : Math.max(0, line.capacity - line.tickets);
      if (!closed && line.drawnAt === null && hasOpened(line, now)) {
        line = await drawPreLine(trx, line, new Date(now));
        await this.events.opened(trx, line);
      }
      const once = [...new Map(joins.map((j) => [j.customerId, j])).values()];
      const tickets = new Map((await giveTickets(trx, line, once, room)).map((t) => [t.customerId, t]));
      return new Map(
        joins.map((join): [Join, Joined] => {
          const ticket = tickets.get(join.customerId);
          if (ticket) {
            // The first join of a customer in this batch made the ticket; a second one finds it.
            const created = ticket.created;
            ticket.created = false;
            return [join, { ticket, line, created }];
          }
          return [join, { refused: closed ? lineClosed(join.sku) : lineFull(join.sku, line.capacity) }];
        }),
      );
    });
  }
}
