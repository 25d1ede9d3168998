import { randomBytes } from 'node:crypto';
import { sql, type Transaction } from 'kysely';
import type { Db } from '../db/database.js';
import type { Database, OrderStatus } from '../db/schema.js';
import type { SaleWindow } from '../inventory/sale-window.js';

type Trx = Transaction<Database>;

/** A line's row with its SKU's name and sale window: what every decision about the line starts from. */
export interface LineRow extends SaleWindow {
  skuId: number;
  sku: string;
  capacity: number;
  holdSeconds: number;
  /** Tickets given, pre-line and after. */
  tickets: number;
  /**
   * Tickets that can never be admitted again: refused, or admitted and their reservation ended. The line's capacity
   * bounds the others (`tickets - finalTickets`), so a line whose tickets have all ended takes joins again.
   */
  finalTickets: number;
  preLineTickets: number;
  drawnAt: Date | null;
  drawSeed: string | null;
  /** Numbers given so far: the last ticket's number. */
  numbersGiven: number;
  /** Units the numbered tickets asked for, in all. */
  unitsGiven: number;
  /** Every ticket numbered up to this one was let through (admitted, or being admitted). */
  admittedThrough: number;
  /** Units those tickets asked for. */
  unitsAdmitted: number;
  soldOutAt: Date | null;
}

export const LINE_COLUMNS = `l.sku_id as "skuId", k.sku, l.capacity, l.hold_seconds as "holdSeconds", l.tickets,
  l.final_tickets as "finalTickets", l.pre_line_tickets as "preLineTickets", l.drawn_at as "drawnAt", l.draw_seed as "drawSeed",
  l.numbers_given as "numbersGiven", l.units_given as "unitsGiven", l.admitted_through as "admittedThrough",
  l.units_admitted as "unitsAdmitted", l.sold_out_at as "soldOutAt",
  (extract(epoch from k.sale_starts_at) * 1000)::float8 as "saleStartsAt",
  (extract(epoch from k.sale_ends_at) * 1000)::float8 as "saleEndsAt"`;
const lineColumns = sql.raw(LINE_COLUMNS);

export type TicketStatus = 'waiting' | 'admitting' | 'admitted' | 'refused';

export interface TicketRow {
  id: string;
  skuId: number;
  customerId: string;
  quantity: number;
  preLine: boolean;
  number: number | null;
  unitsBefore: number | null;
  status: TicketStatus;
  orderId: string | null;
  refusal: string | null;
  joinedAt: Date;
  admittedAt: Date | null;
}

export const TICKET_COLUMNS = `t.id, t.sku_id as "skuId", t.customer_id as "customerId", t.quantity,
  t.pre_line as "preLine", t.number, t.units_before as "unitsBefore", t.status, t.order_id as "orderId", t.refusal,
  t.joined_at as "joinedAt", t.admitted_at as "admittedAt"`;
const ticketColumns = sql.raw(TICKET_COLUMNS);

/** Turns a SKU's line on, or changes its settings; answers the line. */
export async function upsertLine(
  db: Db,
  skuId: number,
  settings: { capacity: number; holdSeconds: number },
): Promise<void> {
  await sql`
    insert into sku_lines (sku_id, capacity, hold_seconds) values (${skuId}, ${settings.capacity}, ${settings.holdSeconds})
    on conflict (sku_id) do update
      set capacity = excluded.capacity, hold_seconds = excluded.hold_seconds, updated_at = now()`.execute(db);
}

/** The SKU's line, or undefined when the SKU is not sold through one. */
export async function readLine(db: Db | Trx, sku: string): Promise<LineRow | undefined> {
  const { rows } = await sql<LineRow>`
    select ${lineColumns} from sku_lines l join skus k on k.id = l.sku_id where k.sku = ${sku}`.execute(db);
  return rows[0];
}

/**
 * The line, locked for the rest of the transaction: every join and every admission pass takes this lock, so the
 * numbers and the admissions it records are committed in the order they were made.
 */
export async function lockLine(trx: Trx, skuId: number): Promise<LineRow | undefined> {
  const { rows } = await sql<LineRow>`
    select ${lineColumns} from sku_lines l join skus k on k.id = l.sku_id
     where l.sku_id = ${skuId} for update of l`.execute(trx);
  return rows[0];
}

/** Every line selling at `now`: opened (or forming a pre-line due for its draw), not sold out, not past its window. */
export async function readSellingLines(db: Db, now: Date): Promise<LineRow[]> {
  const { rows } = await sql<LineRow>`
    select ${lineColumns} from sku_lines l join skus k on k.id = l.sku_id
     where l.sold_out_at is null and (k.sale_ends_at is null or k.sale_ends_at > ${now})
       and (l.drawn_at is not null or k.sale_starts_at is null or k.sale_starts_at <= ${now})`.execute(db);
  return rows;
}

/**
 * Sold-out lines, not past their window, whose SKU holds units again: a restock, an adjustment or a count added them
 * after the line sold out.
 */
export async function readRestockedLines(db: Db | Trx, now: Date, skuId?: number): Promise<LineRow[]> {
  const { rows } = await sql<LineRow>`
    select ${lineColumns} from sku_lines l join skus k on k.id = l.sku_id
     where l.sold_out_at is not null and (k.sale_ends_at is null or k.sale_ends_at > ${now})
       and ${skuId === undefined ? sql`true` : sql`l.sku_id = ${skuId}`}
       and exists (select 1 from stock_segments s
                    where s.sku_id = l.sku_id and s.layout_version = k.layout_version and s.available > 0)`.execute(db);
  return rows;
}

/**
 * Opens a sold-out line again, under its lock: the tickets still waiting were told sold out and stay so (refused out
 * of stock, final), the head moves past every number given, and joins from now on queue for the units that came
 * back. Answers how many tickets were told sold out.
 */
export async function reopenLine(trx: Trx, skuId: number): Promise<number> {
  const { rows } = await sql<{ toldSoldOut: number }>`
    with told as (
      update line_tickets set status = 'refused', refusal = 'out_of_stock'
       where sku_id = ${skuId} and status = 'waiting'
      returning id
    )
    update sku_lines set sold_out_at = null, admitted_through = numbers_given, units_admitted = units_given,
           final_tickets = final_tickets + (select count(*) from told), updated_at = now()
     where sku_id = ${skuId}
    returning (select count(*) from told)::int as "toldSoldOut"`.execute(trx);
  return rows[0]?.toldSoldOut ?? 0;
}

/**
 * The draw, at the opening, under the line's lock: the pre-line's tickets are numbered 1…n in the order of the SHA-256
 * of a fresh random seed followed by the ticket's id. The seed is kept with the line, so anyone with the tickets' ids
 * can repeat the draw and check every number. Answers the line as it is after the draw.
 */
export async function drawPreLine(trx: Trx, line: LineRow, at: Date): Promise<LineRow> {
  const seed = randomBytes(32).toString('hex');
  const order = sql`sha256(convert_to(${seed} || t.id::text, 'UTF8'))`;
  await sql`
    update line_tickets t set number = r.number, units_before = r.units_before
      from (select t.id, row_number() over w as number,
                   coalesce(sum(t.quantity) over (w rows between unbounded preceding and 1 preceding), 0) as units_before
              from line_tickets t where t.sku_id = ${line.skuId} and t.number is null
            window w as (order by ${order})) r
     where t.id = r.id`.execute(trx);
  const { rows } = await sql<{ numbersGiven: number; unitsGiven: number }>`
    update sku_lines set drawn_at = ${at}, draw_seed = ${seed}, numbers_given = pre_line_tickets,
           units_given = pre_line_units
     where sku_id = ${line.skuId}
    returning numbers_given as "numbersGiven", units_given as "unitsGiven"`.execute(trx);
  return { ...line, drawnAt: at, drawSeed: seed, ...rows[0]! };
}

/** The numbered tickets after number `after`, in line order: from the line's head on, `limit` of them. */
export async function readHead(db: Db | Trx, skuId: number, after: number, limit: number): Promise<TicketRow[]> {
  const { rows } = await sql<TicketRow>`
    select ${ticketColumns} from line_tickets t
     where t.sku_id = ${skuId} and t.number > ${after}
     order by t.number limit ${limit}`.execute(db);
  return rows;
}

/** Tickets let through whose reservation is not placed yet (or not recorded yet), in line order. */
export async function readAdmitting(db: Db, skuId: number, limit: number): Promise<TicketRow[]> {
  const { rows } = await sql<TicketRow>`
    select ${ticketColumns} from line_tickets t
     where t.sku_id = ${skuId} and t.status = 'admitting' order by t.number limit ${limit}`.execute(db);
  return rows;
}

/** Units of the tickets let through whose reservation is not recorded yet. */
export async function unitsAdmitting(db: Db | Trx, skuId: number): Promise<number> {
  const { rows } = await sql<{ units: number }>`
    select coalesce(sum(quantity), 0)::bigint as units from line_tickets
     where sku_id = ${skuId} and status = 'admitting'`.execute(db);
  return rows[0]!.units;
}

/**
 * Lets the head's first tickets through, in line order: `admitted` are reserved next (`readAdmitting`), `soldOut` ask
 * for more than can ever come back. The line's head moves past the last of them.
 */
export async function letThrough(
  trx: Trx,
  skuId: number,
  admitted: readonly TicketRow[],
  soldOut: readonly TicketRow[],
): Promise<void> {
  const last = [...admitted, ...soldOut].reduce((a, b) => (b.number! > a.number! ? b : a));
  await sql`
    update line_tickets set status = 'admitting'
     where sku_id = ${skuId} and id = any(${admitted.map((t) => t.id)}::uuid[])`.execute(trx);
  await sql`
    update line_tickets set status = 'refused', refusal = 'out_of_stock'
     where sku_id = ${skuId} and id = any(${soldOut.map((t) => t.id)}::uuid[])`.execute(trx);
  await sql`
    update sku_lines set admitted_through = ${last.number}, units_admitted = ${last.unitsBefore! + last.quantity},
           final_tickets = final_tickets + ${soldOut.length}
     where sku_id = ${skuId}`.execute(trx);
}

/**
 * Records each ticket's reservation; a ticket recorded already (by another instance) keeps its own. Answers the
 * tickets this call recorded.
 */
export async function recordAdmissions(
  trx: Trx,
  admissions: readonly { ticketId: string; orderId: string }[],
): Promise<TicketRow[]> {
  const { rows } = await sql<TicketRow>`
    update line_tickets t set status = 'admitted', order_id = a.order_id, admitted_at = now()
      from unnest(${admissions.map((a) => a.ticketId)}::uuid[], ${admissions.map((a) => a.orderId)}::uuid[])
           as a(ticket_id, order_id)
     where t.id = a.ticket_id and t.status = 'admitting'
    returning ${ticketColumns}`.execute(trx);
  return rows;
}

/** A ticket that can never be admitted (its reservation was refused for a reason waiting cannot cure). */
export async function recordRefusal(db: Db, ticketId: string, refusal: string): Promise<void> {
  await sql`
    with refused as (
      update line_tickets set status = 'refused', refusal = ${refusal}
       where id = ${ticketId} and status = 'admitting'
      returning sku_id
    )
    update sku_lines l set final_tickets = l.final_tickets + 1 from refused r where l.sku_id = r.sku_id`.execute(db);
}

/**
 * Settles the line's admitted tickets whose reservation ended (confirmed, cancelled or expired), counting them final:
 * their places in the line's capacity are free again. Reads the live admissions only (the partial index on tickets
 * not settled); a ticket two instances settle at once is counted by one of them, the other's update finding it settled.
 * Answers how many this call settled.
 */
export async function settleAdmissions(db: Db, skuId: number): Promise<number> {
  const { rows } = await sql<{ settled: number }>`
    with settled as (
      update line_tickets t set settled = true
        from orders o
       where t.sku_id = ${skuId} and t.status = 'admitted' and not t.settled
         and o.id = t.order_id and o.status <> 'reserved'
      returning t.id
    ), counted as (
      update sku_lines set final_tickets = final_tickets + (select count(*) from settled)
       where sku_id = ${skuId} and exists (select 1 from settled)
    )
    select count(*)::int as settled from settled`.execute(db);
  return rows[0]!.settled;
}

/** Marks the line sold out, once: true when this call did. */
export async function markSoldOut(trx: Trx, skuId: number, at: Date): Promise<boolean> {
  const { numAffectedRows } = await sql`
    update sku_lines set sold_out_at = ${at} where sku_id = ${skuId} and sold_out_at is null`.execute(trx);
  return numAffectedRows === 1n;
}

/** A ticket with its line and its reservation's state: all a status answer needs, in one statement. */
export interface TicketState {
  ticket: TicketRow;
  line: LineRow;
  order: { status: OrderStatus; expiresAt: Date | null; due: boolean } | null;
}

export async function readTicketStates(db: Db, ticketIds: readonly string[]): Promise<TicketState[]> {
  const { rows } = await sql<TicketRow & { line: LineRow; order: TicketState['order'] }>`
    select ${ticketColumns}, to_jsonb(line) as line,
           case when o.id is null then null
                else jsonb_build_object('status', o.status, 'expiresAt', o.expires_at,
                                        'due', coalesce(o.expires_at <= now(), false)) end as order
      from line_tickets t
      join lateral (select ${lineColumns} from sku_lines l join skus k on k.id = l.sku_id
                     where l.sku_id = t.sku_id) line on true
      left join orders o on o.id = t.order_id
     where t.id = any(${ticketIds}::uuid[])`.execute(db);
  return rows.map(({ line, order, ...ticket }) => ({
    ticket,
    line: { ...line, ...datesOf(line) },
    order: order && { ...order, expiresAt: order.expiresAt === null ? null : new Date(order.expiresAt) },
  }));
}

/** A line read back from JSON carries its instants as text. */
export function datesOf(line: LineRow): Pick<LineRow, 'drawnAt' | 'soldOutAt'> {
  const date = (value: Date | string | null) => (value === null ? null : new Date(value));
  return { drawnAt: date(line.drawnAt), soldOutAt: date(line.soldOutAt) };
}
