import pg from 'pg';
import { type Db, type PreparedStatement, runPrepared } from '../db/database.js';
import { timeOrderedUuid } from '../db/time-ordered-uuid.js';
import { StatementCombiner } from '../db/statement-combiner.js';
import { AppError } from '../errors.js';
import type { SharedClock } from '../inventory/shared-clock.js';
import type { SkuDirectory } from '../inventory/sku-directory.js';
import type { LineEvents } from './line-events.js';
import {
  datesOf,
  drawPreLine,
  LINE_COLUMNS,
  type LineRow,
  lockLine,
  TICKET_COLUMNS,
  type TicketRow,
} from './line.repository.js';
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
 * batch are written by one statement under the line's lock, so a burst of joins costs a commit per batch, not per
 * customer, and the line's numbers are committed in the order they were given.
 */
export class LineJoins {
  private readonly joins = new StatementCombiner<Join, Joined>((joins) => this.write(joins), MAX_JOIN_BATCH);

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

/** What a batch of joins found: the line as it was when locked, and the tickets, new (`created`) or held already. */
interface JoinedLine {
  line: LineRow & { closed: boolean; mustDraw: boolean };
  tickets: (TicketRow & { created: boolean })[];
}

/**
 * The tickets of the customers who join, in one statement that takes the line's lock and commits on its own, so the
 * lock is held for the statement's own work and never across a round trip: a customer with a ticket gets it
 * (`created` false); the others, in the order given and while the line has room (its live tickets, those given less
 * those `finalTickets`, below its capacity), get new ones. Before the draw a new
 * ticket joins the pre-line, unnumbered; after it, each is numbered on from the line's last number, with the units
 * asked before it. A line that is `closed` (sold out, or past its window at `now`) gives none; nor does one that
 * `mustDraw` (open at `now`, its pre-line not drawn yet): a ticket given then would join a pre-line already closed.
 * `joins` names each customer once. Tickets are read in the statement's snapshot, taken before the lock was granted:
 * a customer whose ticket another instance committed meanwhile gets a unique violation, and the batch is repeated.
 */
async function joinLine(
  db: Db,
  skuId: number,
  joins: readonly { customerId: string; quantity: number }[],
  now: Date,
): Promise<JoinedLine | undefined> {
  const rows = await runPrepared<TicketRow & { created: boolean; line: JoinedLine['line'] }>(db, joinLineStatement, [
    skuId,
    joins.map((j) => j.customerId),
    joins.map((j) => j.quantity),
    joins.map(() => timeOrderedUuid()),
    now,
  ]);
  const found = rows[0]?.line;
  if (!found) return undefined;
  return {
    line: { ...found, ...datesOf(found) },
    tickets: rows.filter((row) => row.id !== null).map(({ line: _, ...ticket }) => ticket),
  };
}

/**
 * `joinLine`'s statement: $1 the SKU's id, $2 and $3 the customers and their quantities, $4 an id for each one's ticket
 * should it get a new one (time-ordered, as orders' are: the tickets' indexes grow at one edge), $5 the shared clock's
 * now.
 */
const joinLineStatement: PreparedStatement = {
  name: 'join_line',
  text: `
    with line as (
      -- The sale window's rules of sale-window.ts, at the shared clock's now.
      select ${LINE_COLUMNS},
             l.sold_out_at is not null or coalesce(k.sale_ends_at <= $5, false) as closed,
             l.drawn_at is null and coalesce(k.sale_starts_at <= $5, true) as "mustDraw"
        from sku_lines l join skus k on k.id = l.sku_id
       where l.sku_id = $1 for update of l
    ), asked as (
      select u.customer_id, u.quantity, u.id, u.ord
        from unnest($2::text[], $3::int[], $4::uuid[]) with ordinality as u(customer_id, quantity, id, ord)
    ), held as (
      select ${TICKET_COLUMNS} from line_tickets t
       where t.sku_id = $1 and t.customer_id in (select customer_id from asked)
    ), fresh as (
      select a.* from asked a
       where not exists (select 1 from held h where h."customerId" = a.customer_id)
       order by a.ord
       limit (select case when closed or "mustDraw" then 0 else greatest(0, capacity - (tickets - "finalTickets")) end
                from line)
    ), numbered as (
      select f.id, f.customer_id, f.quantity,
             case when l."drawnAt" is not null then l."numbersGiven" + row_number() over w end as number,
             case when l."drawnAt" is not null then l."unitsGiven"
                  + coalesce(sum(f.quantity) over (w rows between unbounded preceding and 1 preceding), 0) end
               as units_before
        from fresh f cross join line l window w as (order by f.ord)
    ), given as (
      insert into line_tickets as t (id, sku_id, customer_id, quantity, pre_line, number, units_before)
      select n.id, $1, n.customer_id, n.quantity, l."drawnAt" is null, n.number, n.units_before
        from numbered n cross join line l
      returning ${TICKET_COLUMNS}
    ), counted as (
      update sku_lines l
         set tickets = l.tickets + n.tickets,
             pre_line_tickets = l.pre_line_tickets + case when line."drawnAt" is null then n.tickets else 0 end,
             pre_line_units = l.pre_line_units + case when line."drawnAt" is null then n.units else 0 end,
             numbers_given = l.numbers_given + case when line."drawnAt" is null then 0 else n.tickets end,
             units_given = l.units_given + case when line."drawnAt" is null then 0 else n.units end
        from line, (select count(*)::int as tickets, coalesce(sum(quantity), 0)::bigint as units from numbered) n
       where l.sku_id = $1 and n.tickets > 0
    )
    select t.*, to_jsonb(line) as line
      from line left join (select *, true as created from given union all select *, false from held) t on true`,
};
