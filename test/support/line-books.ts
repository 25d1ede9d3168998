import { setTimeout as sleep } from 'node:timers/promises';
import { sql } from 'kysely';
import type { Db } from '../../src/db/database.js';
import { auditSku, booksViolations } from './invariants.js';
import { drawOrder, type Join } from './line-drop.js';

// A line's books straight from Postgres, bypassing the service, against what its customers were told: every
// acknowledged ticket kept, one per customer; the line's numbers as the draw and the arrivals gave them; tickets let
// through strictly in line order, each admission one order; the SKU's books exact (the one books checker), and every
// unit of an admission that ended admitted again. Each check returns every broken invariant with its figures.

interface LineState {
  admittedThrough: number;
  letThrough: number;
  lastLetThrough: number;
  /** Tickets still waiting with a number the line's head has passed: someone let through out of turn. */
  passedOver: number;
}

/**
 * Samples, every 50 ms while a drop runs, that the tickets let through (admitting, admitted or refused) are exactly
 * the line's first `admitted_through` numbers. One statement, so one snapshot: a pass commits its let-through whole.
 */
export class LineOrderSampler {
  readonly violations: string[] = [];
  /** Distinct heads seen (`admitted_through` values), and how many samples were read. */
  readonly heads = new Set<number>();
  samples = 0;
  private running = true;
  private done: Promise<void> | undefined;

  constructor(
    private readonly db: Db,
    private readonly sku: string,
  ) {}

  start(): this {
    this.done = (async () => {
      while (this.running) {
        const state = await this.read().catch(() => undefined); // Postgres away: the next sample
        if (state) {
          this.samples++;
          this.heads.add(state.admittedThrough);
          const { admittedThrough, letThrough, lastLetThrough, passedOver } = state;
          if (letThrough !== admittedThrough || lastLetThrough !== admittedThrough || passedOver !== 0) {
            this.violations.push(`sample ${this.samples}: ${JSON.stringify(state)}`);
          }
        }
        await sleep(50);
      }
    })();
    return this;
  }

  async stop(): Promise<void> {
    this.running = false;
    await this.done;
  }

  private async read(): Promise<LineState | undefined> {
    const { rows } = await sql<Record<keyof LineState, string>>`
      select l.admitted_through as "admittedThrough",
             (select count(*) from line_tickets t where t.sku_id = l.sku_id and t.status <> 'waiting') as "letThrough",
             (select coalesce(max(t.number), 0) from line_tickets t
               where t.sku_id = l.sku_id and t.status <> 'waiting') as "lastLetThrough",
             (select count(*) from line_tickets t where t.sku_id = l.sku_id and t.status = 'waiting'
                 and t.number <= l.admitted_through) as "passedOver"
        from sku_lines l join skus k on k.id = l.sku_id where k.sku = ${this.sku}`.execute(this.db);
    const row = rows[0];
    return row && (Object.fromEntries(Object.entries(row).map(([k, v]) => [k, Number(v)])) as unknown as LineState);
  }
}

interface TicketRow {
  id: string;
  customerId: string;
  quantity: number;
  preLine: boolean;
  number: number | null;
  unitsBefore: number | null;
  status: string;
  orderId: string | null;
  refusal: string | null;
  admittedAt: Date | null;
  /** Admitted, and its reservation ended: counted final. */
  settled: boolean;
  /** The orders under the ticket's Idempotency-Key (`line <ticket id>`): their ids and statuses. */
  orders: { id: string; status: string; quantity: number; customerId: string }[];
  /** When its order's units came back (cancelled or expired), if they did. */
  returnedAt: Date | null;
}

export interface LineReport {
  tickets: number;
  preLine: number;
  admittedThrough: number;
  /** Tickets given an order, and what became of the orders. */
  admitted: number;
  orderStatuses: Record<string, number>;
  /** Tickets passed as sold out (they asked for more than could come back). */
  refusedSoldOut: number;
  soldOutAt: Date | null;
  sold: number;
  stock: number;
  violations: string[];
}

/** Checks the SKU's line and books from Postgres against the joins its customers made (see the top of this file). */
export function checkLine(db: Db, sku: string, joins: readonly Join[]): Promise<LineReport> {
  // One snapshot for every read: admissions may still be under way.
  return db
    .transaction()
    .setIsolationLevel('repeatable read')
    .execute((trx) => checkSnapshot(trx, sku, joins));
}

async function checkSnapshot(db: Db, sku: string, joins: readonly Join[]): Promise<LineReport> {
  const violations: string[] = [];
  const { rows: lines } = await sql<{
    skuId: number;
    tickets: number;
    preLineTickets: number;
    numbersGiven: string;
    admittedThrough: string;
    drawSeed: string | null;
    soldOutAt: Date | null;
    finalTickets: number;
  }>`
    select l.sku_id as "skuId", l.tickets, l.final_tickets as "finalTickets", l.pre_line_tickets as "preLineTickets", l.numbers_given as "numbersGiven",
           l.admitted_through as "admittedThrough", l.draw_seed as "drawSeed", l.sold_out_at as "soldOutAt"
      from sku_lines l join skus k on k.id = l.sku_id where k.sku = ${sku}`.execute(db);
  const line = lines[0];
  if (!line) throw new Error(`no line for ${sku}`);
  const admittedThrough = Number(line.admittedThrough);
  const { rows } = await sql<TicketRow>`
    select t.id, t.customer_id as "customerId", t.quantity, t.pre_line as "preLine", t.number::int,
           t.units_before::int as "unitsBefore", t.status, t.order_id as "orderId", t.refusal,
           t.admitted_at as "admittedAt", t.settled,
           coalesce((select json_agg(json_build_object('id', o.id, 'status', o.status, 'quantity', o.quantity,
                                                       'customerId', o.customer_id))
                       from orders o where o.idempotency_key = 'line ' || t.id::text), '[]') as orders,
           (select max(r.created_at) from stock_returns r where r.order_id = t.order_id) as "returnedAt"
      from line_tickets t where t.sku_id = ${line.skuId}`.execute(db);
  const tickets = new Map(rows.map((t) => [t.id, t]));
  const byCustomer = new Map(rows.map((t) => [t.customerId, t]));

  // Every acknowledged join: one ticket per customer, kept as answered.
  const sent = new Set(joins.map((j) => j.customerId));
  for (const join of joins) {
    const named = new Set(join.attempts.flatMap((a) => (a.status === 201 || a.status === 200 ? [a.ticketId] : [])));
    if (named.size > 1) violations.push(`${join.customerId} was answered ${named.size} different tickets`);
    const stored = byCustomer.get(join.customerId);
    if (join.ticketId && (!stored || stored.id !== join.ticketId || stored.quantity !== join.quantity)) {
      violations.push(`${join.customerId}'s acknowledged ticket ${join.ticketId} is lost or differs: ${stored?.id}`);
    }
  }
  const phantom = rows.filter((t) => !sent.has(t.customerId)).length;
  if (phantom > 0) violations.push(`${phantom} ticket(s) of customers who never joined`);
  if (line.tickets !== rows.length) violations.push(`the line counts ${line.tickets} tickets, ${rows.length} stored`);
  // Final tickets, each counted once: the refused, and the admitted whose reservation ended.
  const final = rows.filter((t) => t.status === 'refused' || t.settled).length;
  if (line.finalTickets !== final) violations.push(`the line counts ${line.finalTickets} final tickets, ${final} are`);
  const liveSettled = rows.filter((t) => t.settled && t.orders.some((o) => o.status === 'reserved')).length;
  if (liveSettled > 0) violations.push(`${liveSettled} ticket(s) settled while their reservation is live`);

  // Numbers: 1…n once each, the pre-line's by the recorded draw, the later ones after it in arrival order.
  const numbered = rows.filter((t) => t.number !== null).sort((a, b) => a.number! - b.number!);
  if (numbered.length !== rows.length) violations.push(`${rows.length - numbered.length} ticket(s) without a number`);
  if (numbered.some((t, i) => t.number !== i + 1) || numbered.length !== Number(line.numbersGiven)) {
    violations.push(`numbers are not 1…${line.numbersGiven} once each`);
  }
  let units = 0;
  for (const t of numbered) {
    if (t.unitsBefore !== units)
      violations.push(`ticket ${t.number} has ${t.unitsBefore} units before it, not ${units}`);
    units += t.quantity;
  }
  const preLine = rows.filter((t) => t.preLine);
  if (preLine.length !== line.preLineTickets)
    violations.push(`${preLine.length} pre-line tickets, line says ${line.preLineTickets}`);
  if (line.drawSeed === null) violations.push('the pre-line was never drawn');
  else {
    const drawn = drawOrder(
      line.drawSeed,
      preLine.map((t) => t.id),
    );
    const misplaced = drawn.filter((id, i) => tickets.get(id)!.number !== i + 1).length;
    if (misplaced > 0) violations.push(`${misplaced} pre-line ticket(s) not where the recorded draw puts them`);
  }
  const early = rows.filter((t) => !t.preLine && t.number !== null && t.number <= preLine.length).length;
  if (early > 0) violations.push(`${early} post-opening ticket(s) numbered inside the pre-line`);
  violations.push(...arrivalOrderViolations(joins, tickets));

  // Let through strictly in line order: exactly the first `admitted_through` numbers.
  const outOfTurn = numbered.filter((t) => (t.status !== 'waiting') !== t.number! <= admittedThrough);
  if (outOfTurn.length > 0) {
    violations.push(`${outOfTurn.length} ticket(s) let through out of turn, e.g. ${JSON.stringify(outOfTurn[0])}`);
  }

  // One order per admission, the ticket's own; no order of the SKU outside the line.
  const orderStatuses: Record<string, number> = {};
  for (const t of rows) {
    const expected = t.status === 'admitted' ? 1 : t.status === 'admitting' ? -1 : 0;
    if (t.orders.length > 1) violations.push(`ticket ${t.number} has ${t.orders.length} orders`);
    else if (expected === 1 && t.orders[0]?.id !== t.orderId) violations.push(`ticket ${t.number} lost its order`);
    else if (expected === 0 && t.orders.length > 0) violations.push(`ticket ${t.number} (${t.status}) has an order`);
    for (const o of t.orders) {
      if (Number(o.quantity) !== t.quantity || o.customerId !== t.customerId) {
        violations.push(`ticket ${t.number}'s order is not its customer's or quantity: ${JSON.stringify(o)}`);
      }
      if (t.status === 'admitted') orderStatuses[o.status] = (orderStatuses[o.status] ?? 0) + 1;
    }
  }
  const { rows: outside } = await sql<{ count: string }>`
    select count(*) from orders o join skus k on k.id = o.sku_id
     where k.sku = ${sku} and (o.idempotency_key is null or o.idempotency_key not like 'line %')`.execute(db);
  if (Number(outside[0]!.count) > 0) violations.push(`${outside[0]!.count} order(s) of the SKU outside the line`);

  // The SKU's books, by the one books checker; and every unit an admission gave back admitted again, after it came back.
  const audit = await auditSku(db, sku);
  violations.push(...booksViolations(audit));
  const admitted = numbered.filter((t) => t.status === 'admitted');
  const admittedUnits = admitted.reduce((total, t) => total + t.quantity, 0);
  const ended = admitted.filter((t) => t.returnedAt !== null);
  const endedUnits = ended.reduce((total, t) => total + t.quantity, 0);
  if (line.soldOutAt !== null && admittedUnits - endedUnits !== audit.sold) {
    violations.push(`admitted ${admittedUnits} units, ${endedUnits} came back, but ${audit.sold} sold`);
  }
  violations.push(...readmissionViolations(admitted, audit.totalStock));

  return {
    tickets: rows.length,
    preLine: preLine.length,
    admittedThrough,
    admitted: admitted.length,
    orderStatuses,
    refusedSoldOut: rows.filter((t) => t.status === 'refused' && t.refusal === 'out_of_stock').length,
    soldOutAt: line.soldOutAt,
    sold: audit.sold,
    stock: audit.totalStock,
    violations,
  };
}

/**
 * A ticket made after the opening whose join was answered before another's was first sent is ahead of it in line (the
 * line's lock orders the numbers as the joins committed): for each join, every join acknowledged before it was sent
 * must hold a smaller number.
 */
function arrivalOrderViolations(joins: readonly Join[], tickets: Map<string, TicketRow>): string[] {
  const late = joins
    .filter((j) => j.ticketId && tickets.get(j.ticketId)?.preLine === false)
    .map((j) => ({
      number: tickets.get(j.ticketId!)!.number!,
      firstSentAt: j.attempts[0]!.sentAt,
      answeredAt: j.attempts.find((a) => a.status === 201 || a.status === 200)!.receivedAt,
    }));
  const byAnswer = [...late].sort((a, b) => a.answeredAt - b.answeredAt);
  const bySending = [...late].sort((a, b) => a.firstSentAt - b.firstSentAt);
  let highest = 0;
  let next = 0;
  let inversions = 0;
  for (const join of bySending) {
    while (next < byAnswer.length && byAnswer[next]!.answeredAt < join.firstSentAt) {
      highest = Math.max(highest, byAnswer[next++]!.number);
    }
    if (highest >= join.number) inversions++;
  }
  return inversions > 0 ? [`${inversions} post-opening ticket(s) numbered before a join answered ahead of them`] : [];
}

/**
 * Units beyond the stock are admitted only from units that came back: the admitted tickets in the order their
 * admissions were recorded, each needing (units recorded up to it − stock) returned units, must have been recorded
 * after that many had come back. Recorded order, not line order: a ticket let through first may get its reservation
 * after one behind it when its first attempt failed (a dependency away), its units promised to it meanwhile.
 */
function readmissionViolations(admitted: readonly TicketRow[], stock: number): string[] {
  const returns = admitted
    .filter((t) => t.returnedAt !== null)
    .map((t) => ({ at: t.returnedAt!.getTime(), units: t.quantity }))
    .sort((a, b) => a.at - b.at);
  let cumulative = 0;
  const back = returns.map((r) => ({ at: r.at, total: (cumulative += r.units) }));
  let admittedUnits = 0;
  const early: string[] = [];
  const recorded = [...admitted].sort((a, b) => (a.admittedAt?.getTime() ?? 0) - (b.admittedAt?.getTime() ?? 0));
  for (const t of recorded) {
    admittedUnits += t.quantity;
    const needed = admittedUnits - stock;
    if (needed <= 0) continue;
    const enoughBack = back.find((b) => b.total >= needed);
    if (!enoughBack || t.admittedAt === null || t.admittedAt.getTime() < enoughBack.at) {
      early.push(
        `#${t.number} admitted ${t.admittedAt?.toISOString()} needing ${needed} back, back by ${enoughBack && new Date(enoughBack.at).toISOString()}`,
      );
    }
  }
  return early.length > 0
    ? [
        `${early.length} ticket(s) admitted beyond the stock before enough units came back: ${early.slice(0, 3).join('; ')}`,
      ]
    : [];
}
