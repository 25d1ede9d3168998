import type { Db } from '../db/database.js';
import { StatementCombiner } from '../db/statement-combiner.js';
import type { SharedClock } from '../inventory/shared-clock.js';
import type { SkuDirectory } from '../inventory/sku-directory.js';
import type { Outbox } from '../events/outbox.js';
import type { Logger } from '../logger.js';
import type { OrderPlacement } from '../orders/order-placement.js';
import { LineAdmissions, type LineHooks } from './line-admissions.js';
import { LineEvents } from './line-events.js';
import { LineJoins } from './line-joins.js';
import { readLine, readTicketStates, type TicketState, upsertLine } from './line.repository.js';
import { lineNotFound, ticketNotFound } from './line-refusals.js';
import { type LineView, lineView, type TicketView, ticketView } from './ticket-view.js';

/** Most ticket reads one statement serves. */
const MAX_READ_BATCH = 500;

/**
 * Waiting lines in front of hot SKUs: what the routes call. A SKU given a line (`configure`) is sold only through it:
 * customers join (`join`) and get a ticket, and `LineAdmissions` reserves units for the tickets in line order.
 */
export class Lines {
  private readonly joins: LineJoins;
  private readonly admissions: LineAdmissions;
  /** Status reads come by the thousand while a drop waits: those that arrive during a read share the next one. */
  private readonly reads = new StatementCombiner<string, TicketState | undefined>(async (ticketIds) => {
    const states = new Map((await readTicketStates(this.db, ticketIds)).map((state) => [state.ticket.id, state]));
    return ticketIds.map((id) => states.get(id));
  }, MAX_READ_BATCH);

  constructor(
    private readonly db: Db,
    private readonly directory: SkuDirectory,
    placement: OrderPlacement,
    private readonly clock: SharedClock,
    log: Logger,
    outbox: Outbox,
    hooks: LineHooks = {},
  ) {
    const events = new LineEvents(outbox);
    this.joins = new LineJoins(db, directory, clock, events);
    this.admissions = new LineAdmissions(db, placement, clock, log, events, hooks);
  }

  start(): void {
    this.admissions.start();
  }

  stop(): Promise<void> {
    return this.admissions.stop();
  }

  /** Gives the SKU a line, or changes its settings; every instance refuses the SKU's direct orders from then on. */
  async configure(sku: string, settings: { capacity: number; holdSeconds: number }): Promise<LineView> {
    const entry = await this.directory.get(sku);
    await upsertLine(this.db, entry.id, settings);
    await this.directory.announceChange(sku);
    return this.line(sku);
  }

  async line(sku: string): Promise<LineView> {
    const line = await readLine(this.db, sku);
    if (!line) {
      await this.directory.get(sku); // sku_not_found for a SKU that does not exist
      throw lineNotFound(sku);
    }
    return lineView(line, this.clock.now());
  }

  /**
   * The customer's ticket; `created` when this join made it (joining again answers the same ticket, read again: it may
   * have been admitted since).
   */
  async join(sku: string, customerId: string, quantity: number): Promise<{ ticket: TicketView; created: boolean }> {
    const { ticket, line, created } = await this.joins.join(sku, customerId, quantity);
    if (!created) return { ticket: await this.ticket(ticket.id), created };
    return { ticket: ticketView({ ticket, line, order: null }, this.clock.now()), created };
  }

  /** The ticket; for a caller bound to `customerId`, only that customer's (another's answers as unknown). */
  async ticket(ticketId: string, customerId?: string): Promise<TicketView> {
    const state = await this.reads.run(ticketId);
    if (!state || (customerId !== undefined && state.ticket.customerId !== customerId)) throw ticketNotFound(ticketId);
    return ticketView(state, this.clock.now());
  }

  /** Several tickets in one statement, by id; unknown ids are left out. */
  async tickets(ticketIds: readonly string[]): Promise<Map<string, TicketView>> {
    const now = this.clock.now();
    const states = await readTicketStates(this.db, ticketIds);
    return new Map(states.map((state) => [state.ticket.id, ticketView(state, now)]));
  }
}
