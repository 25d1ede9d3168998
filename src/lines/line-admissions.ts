import type { Db } from '../db/database.js';
import { AppError } from '../errors.js';
import { PeriodicJob } from '../events/periodic-job.js';
import type { SharedClock } from '../inventory/shared-clock.js';
import type { Logger } from '../logger.js';
import type { OrderPlacement } from '../orders/order-placement.js';
import { readSkuStock } from '../stock/stock.repository.js';
import {
  drawPreLine,
  letThrough,
  lockLine,
  type LineRow,
  markSoldOut,
  readAdmitting,
  readHead,
  readRestockedLines,
  readSellingLines,
  reopenLine,
  recordAdmissions,
  recordRefusal,
  settleAdmissions,
  type TicketRow,
  unitsAdmitting,
} from './line.repository.js';
import { hasEnded, hasOpened } from '../inventory/sale-window.js';
import type { LineEvents } from './line-events.js';

/** How often each instance looks at its lines: returned units reach the next ticket, and a sold-out line is marked, well within a second. */
const PASS_INTERVAL_MS = 200;
/** Tickets one pass considers from the head of a line. */
const HEAD_BATCH = 1_000;
/** Refusals that waiting cannot cure: the ticket is never admitted, and the line moves on. */
const FINAL_REFUSALS = new Set(['purchase_limit', 'customer_required', 'idempotency_key_reused']);

/** Observers of admissions (metrics, the live page); every hook is optional and must not throw. */
export interface LineHooks {
  admitted?(sku: string, tickets: number): void;
  soldOut?(sku: string): void;
}

/**
 * Admits each line's tickets in line order as stock allows. Every instance runs a pass every 200 ms; a pass over a line
 * looks first without the line's lock and takes it only when there is something to let through (the instances' passes
 * over one line then take turns, and joins wait for the pass's few statements), in two steps:
 *
 * 1. **Let through**, in one transaction: draw the pre-line once the sale opens; then take tickets from the head of
 *    the line, in order, while the units they ask for are available and not already promised to tickets let through
 *    before; stop at the first that does not fit, so nobody passes a ticket that waits for units it could still get.
 *    A ticket asking for more than can ever come back (available plus reserved) is sold out and passed. With nothing
 *    available, nothing reserved and nothing promised, the line is sold out.
 * 2. **Reserve** each ticket let through with an order through the order path, held for the line's `holdSeconds`,
 *    under an Idempotency-Key of the ticket's own: an instance that dies between placing and recording leaves the
 *    ticket let through, and the next pass, on any instance, gets the same order back instead of a second one.
 *
 * Units of an admission that expires or is cancelled go back to stock like any order's, and the next pass lets the
 * next ticket through.
 */
export class LineAdmissions {
  private readonly passes = new PeriodicJob(
    PASS_INTERVAL_MS,
    () => this.pass(),
    (error) => this.log.warn({ err: error.message }, 'line pass failed; retried on the next'),
  );

  constructor(
    private readonly db: Db,
    private readonly placement: OrderPlacement,
    private readonly clock: SharedClock,
    private readonly log: Logger,
    private readonly events: LineEvents,
    private readonly hooks: LineHooks = {},
  ) {}

  start(): void {
    this.passes.start();
  }

  stop(): Promise<void> {
    return this.passes.stop();
  }

  /** One pass over every line selling, after opening again the sold-out lines whose SKU got units back. */
  async pass(): Promise<void> {
    let lines: LineRow[];
    try {
      await this.reopenRestocked();
      lines = await readSellingLines(this.db, new Date(this.clock.now()));
    } catch (error) {
      this.log.warn({ err: (error as Error).message }, 'line pass could not read the lines');
      return;
    }
    for (const line of lines) {
      try {
        // A full line's ended admissions free their places in it; a line with room has no need to count them yet.
        if (line.tickets - line.finalTickets >= line.capacity) await settleAdmissions(this.db, line.skuId);
        const promised = await unitsAdmitting(this.db, line.skuId);
        if (await this.worthLocking(line, promised)) {
          const { line: served, soldOut } = await this.letThrough(line.skuId);
          if (soldOut) this.hooks.soldOut?.(line.sku);
          if (served) await this.reserve(served);
        } else if (promised > 0) {
          await this.reserve(line);
        }
      } catch (error) {
        this.log.warn({ err: (error as Error).message, sku: line.sku }, 'line pass failed; retried on the next');
      }
    }
  }

  /**
   * A sold-out line whose SKU holds units again (a restock, an adjustment, a count) opens again, under its lock: its
   * units would otherwise be sold through nothing, for orders need the line and joins find it closed.
   */
  private async reopenRestocked(): Promise<void> {
    const now = new Date(this.clock.now());
    for (const candidate of await readRestockedLines(this.db, now)) {
      await this.db.transaction().execute(async (trx) => {
        const line = await lockLine(trx, candidate.skuId);
        // Another instance's pass may have opened it first.
        if (!line || (await readRestockedLines(trx, now, line.skuId)).length === 0) return;
        const toldSoldOut = await reopenLine(trx, line.skuId);
        await this.events.reopened(trx, line, now, toldSoldOut);
      });
      this.log.info({ sku: candidate.sku }, 'sold-out line opened again: its SKU holds units again');
    }
  }

  /**
   * Whether step 1 has anything to do, judged without the line's lock: a draw due, the sold-out moment, or a first
   * waiting ticket that fits the free units or never can. The lock is the one every join waits for, and on a busy
   * instance each round trip under it costs everyone that instance's event-loop delay; when every unit is held, a pass
   * that locked the line only to find nothing would do so ten times a second. A judgement on a stale read only moves
   * the work to the next pass: step 1 decides again under the lock.
   */
  private async worthLocking(line: LineRow, promised: number): Promise<boolean> {
    if (line.drawnAt === null) return true;
    const stock = await readSkuStock(this.db, line.sku);
    if (!stock) return false;
    const available = stock.segments.reduce((total, s) => total + s.available, 0);
    if (available === 0 && stock.reserved === 0 && promised === 0) return true;
    const [next] = await readHead(this.db, line.skuId, line.admittedThrough, 1);
    return next !== undefined && (next.quantity <= available - promised || next.quantity > available + stock.reserved);
  }

  /** Step 1: the line, unless it was not this pass's to serve, and whether it sold out now. */
  private letThrough(skuId: number): Promise<{ line?: LineRow; soldOut?: boolean }> {
    const now = this.clock.now();
    return this.db.transaction().execute(async (trx) => {
      let line = await lockLine(trx, skuId);
      if (!line || line.soldOutAt !== null || hasEnded(line, now)) return {};
      if (line.drawnAt === null) {
        if (!hasOpened(line, now)) return {};
        line = await drawPreLine(trx, line, new Date(now));
        await this.events.opened(trx, line);
      }
      const stock = await readSkuStock(trx, line.sku);
      if (!stock) return {};
      const available = stock.segments.reduce((total, s) => total + s.available, 0);
      const promised = await unitsAdmitting(trx, skuId);
      if (available === 0 && stock.reserved === 0 && promised === 0) {
        const soldOut = await markSoldOut(trx, skuId, new Date(now));
        if (soldOut) await this.events.soldOut(trx, line, new Date(now));
        return { line, soldOut };
      }
      const reachable = available + stock.reserved;
      let free = available - promised;
      const passed: TicketRow[] = [];
      const soldOut: TicketRow[] = [];
      // The head is read a little at a time: with nothing free, only the first ticket (it waits, or is sold out).
      let after = line.admittedThrough;
      let waits = false;
      while (!waits && passed.length + soldOut.length < HEAD_BATCH) {
        const head = await readHead(trx, skuId, after, Math.min(HEAD_BATCH, Math.max(0, free) + 1));
        for (const ticket of head) {
          if (ticket.quantity > reachable) soldOut.push(ticket);
          else if (ticket.quantity <= free) {
            free -= ticket.quantity;
            passed.push(ticket);
          } else {
            waits = true;
            break;
          }
        }
        if (head.length === 0) break;
        after = head.at(-1)!.number!;
      }
      if (passed.length + soldOut.length > 0) await letThrough(trx, skuId, passed, soldOut);
      return { line };
    });
  }

  /** Step 2: a reservation for every ticket let through and not recorded yet. */
  private async reserve(line: LineRow): Promise<void> {
    const tickets = await readAdmitting(this.db, line.skuId, HEAD_BATCH);
    const admissions: { ticketId: string; orderId: string }[] = [];
    await Promise.all(
      tickets.map(async (ticket) => {
        try {
          const { order } = await this.placement.place({
            lines: [{ sku: line.sku, quantity: ticket.quantity }],
            customerId: ticket.customerId,
            holdSeconds: line.holdSeconds,
            idempotencyKey: `line ${ticket.id}`,
            fromLine: true,
          });
          admissions.push({ ticketId: ticket.id, orderId: order.id });
        } catch (error) {
          if (error instanceof AppError && FINAL_REFUSALS.has(error.code)) {
            await recordRefusal(this.db, ticket.id, error.code);
          } else {
            // Out of stock for a moment, a busy segment, a dependency away: the ticket keeps its turn.
            this.log.debug({ err: (error as Error).message, ticketId: ticket.id }, 'admission not placed yet');
          }
        }
      }),
    );
    if (admissions.length === 0) return;
    // With their events, and counted once: a ticket another instance recorded first is not recorded again.
    const recorded = await this.db.transaction().execute(async (trx) => {
      const tickets = await recordAdmissions(trx, admissions);
      await this.events.admitted(trx, line.skuId, tickets);
      return tickets.length;
    });
    if (recorded > 0) this.hooks.admitted?.(line.sku, recorded);
  }
}
