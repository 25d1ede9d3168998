import pg from 'pg';
import type { Db } from '../db/database.js';
import { WriteCombiner } from '../db/write-combiner.js';
import { AppError } from '../errors.js';
import type { SharedClock } from '../inventory/shared-clock.js';
import type { SkuDirectory } from '../inventory/sku-directory.js';
import type { LineEvents } from './line-events.js';
import { drawPreLine, joinLine, type JoinedLine, type LineRow, lockLine, type TicketRow } from './line.repository.js';
import { lineClosed, lineFull, lineNotFound } from './line-refusals.js';
import { hasOpened } from '../inventory/sale-window.js';

/** Most joins one statement serves. */
const MAX_JOIN_BATCH = 500;
/**
 * A batch repeats after drawing the pre-line, or when another instance gave one of its customers a ticket meanwhile;
 * more than a few repeats is a fault.
 */
const MAX_JOIN_ATTEMPTS = 3;

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
   * One SKU's joins, in one statement under its line's lock (`joinLine`). A line that opened and has not drawn its
   * pre-line yet is drawn first, in a transaction of its own, so that every ticket given after the opening comes after
   * the whole pre-line; a customer whose ticket another instance gave meanwhile makes the statement fail, and the
   * repeat finds that ticket.
   */
  private async writeOne(skuId: number, joins: Join[]): Promise<Map<Join, Joined>> {
    const once = [...new Map(joins.map((j) => [j.customerId, j])).values()];
    let joined: JoinedLine | undefined;
    for (let attempt = 1; ; attempt++) {
      try {
        joined = await joinLine(this.db, skuId, once, new Date(this.clock.now()));
      } catch (error) {
        if (attempt < MAX_JOIN_ATTEMPTS && isUniqueViolation(error)) continue;
        throw error;
      }
      if (!joined?.line.mustDraw) break;
      if (attempt === MAX_JOIN_ATTEMPTS) throw new Error(`the line of SKU ${skuId} opened and could not be drawn`);
      await this.draw(skuId);
    }
    if (!joined) return new Map(joins.map((join) => [join, { refused: lineNotFound(join.sku) }]));
    const { line, tickets: given } = joined;
    const tickets = new Map(given.map((t) => [t.customerId, t]));
    return new Map(
      joins.map((join): [Join, Joined] => {
        const ticket = tickets.get(join.customerId);
        if (ticket) {
          // The first join of a customer in this batch made the ticket; a second one finds it.
          const created = ticket.created;
          ticket.created = false;
          return [join, { ticket, line, created }];
        }
        return [join, { refused: line.closed ? lineClosed(join.sku) : lineFull(join.sku, line.capacity) }];
      }),
    );
  }

  /** Draws the line's pre-line if it has opened and nobody drew it yet (the admission pass may have). */
  private async draw(skuId: number): Promise<void> {
    const now = this.clock.now();
    await this.db.transaction().execute(async (trx) => {
      const line = await lockLine(trx, skuId);
      if (!line || line.drawnAt !== null || !hasOpened(line, now)) return;
      await this.events.opened(trx, await drawPreLine(trx, line, new Date(now)));
    });
  }
}

/** Postgres's unique_violation: here, a customer's second ticket, given by another instance's statement first. */
function isUniqueViolation(error: unknown): boolean {
  return error instanceof pg.DatabaseError && error.code === '23505';
}
