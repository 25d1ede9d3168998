import { sql, type Transaction } from 'kysely';
import type { Db } from '../db/database.js';
import type { Database, OrderStatus } from '../db/schema.js';

type Trx = Transaction<Database>;

/** One ledger row of an order: units taken from one segment of one layout of a SKU. */
export interface TakenUnits {
  skuId: number;
  sku: string;
  layoutVersion: number;
  segment: number;
  quantity: number;
}

/** The order's ledger rows. */
export async function readTakenUnits(db: Db, orderId: string): Promise<TakenUnits[]> {
  const { rows } = await sql<TakenUnits>`
    select d.sku_id as "skuId", k.sku, d.layout_version as "layoutVersion", d.segment, d.quantity
      from stock_deductions d join skus k on k.id = d.sku_id
     where d.order_id = ${orderId}
     order by k.sku, d.segment`.execute(db);
  return rows.map((row) => ({ ...row, quantity: Number(row.quantity) }));
}

/** The order's status, locked for the rest of the transaction; `due` when a reservation's hold has run out. */
export async function lockOrderStatus(
  trx: Trx,
  orderId: string,
): Promise<{ status: OrderStatus; due: boolean; customerId: string | null } | undefined> {
  const { rows } = await sql<{ status: OrderStatus; due: boolean; customer_id: string | null }>`
    select status, coalesce(expires_at <= now(), false) as due, customer_id
      from orders where id = ${orderId} for update`.execute(trx);
  const row = rows[0];
  return row && { status: row.status, due: row.due, customerId: row.customer_id };
}

export async function setOrderStatus(trx: Trx, orderId: string, status: OrderStatus): Promise<void> {
  await sql`update orders set status = ${status} where id = ${orderId}`.execute(trx);
}

/**
 * Moves the order's units between the running totals: out of `from` (reserved or sold) and into `to` (sold on a
 * confirm; nothing on a return, whose units go back to `available` separately). Segments of the current layout carry
 * their own totals; units taken from a replaced layout are counted on the SKU row, where re-segmentation moved them.
 * Two statements, in this order, so a re-segmentation racing this one is seen whichever way it went: the first waits
 * for it and then finds its rows gone, and the second, with a fresh snapshot, counts those units on the SKU row.
 */
export async function moveRunningTotals(
  trx: Trx,
  orderId: string,
  from: 'reserved' | 'sold',
  to: 'sold' | null,
): Promise<void> {
  const segmentColumns = {
    reserved: sql.raw(
      to === 'sold'
        ? 'reserved = s.reserved - d.quantity, sold = s.sold + d.quantity'
        : 'reserved = s.reserved - d.quantity',
    ),
    sold: sql.raw('sold = s.sold - d.quantity'),
  }[from];
  await sql`
    update stock_segments s set ${segmentColumns}
      from stock_deductions d
     where d.order_id = ${orderId}
       and s.sku_id = d.sku_id and s.layout_version = d.layout_version and s.segment = d.segment`.execute(trx);
  const skuColumns = {
    reserved: sql.raw(
      to === 'sold'
        ? 'reserved_in_earlier_layouts = k.reserved_in_earlier_layouts - x.quantity, sold_in_earlier_layouts = k.sold_in_earlier_layouts + x.quantity'
        : 'reserved_in_earlier_layouts = k.reserved_in_earlier_layouts - x.quantity',
    ),
    sold: sql.raw('sold_in_earlier_layouts = k.sold_in_earlier_layouts - x.quantity'),
  }[from];
  await sql`
    update skus k set ${skuColumns}
      from (select d.sku_id, sum(d.quantity) as quantity from stock_deductions d
             where d.order_id = ${orderId}
               and not exists (select 1 from stock_segments s where s.sku_id = d.sku_id
                                  and s.layout_version = d.layout_version and s.segment = d.segment)
             group by d.sku_id) x
     where k.id = x.sku_id`.execute(trx);
}

/** Units going back to one segment of the current layout, written by the holder of its lock. */
export interface UnitsBack {
  skuId: number;
  layoutVersion: number;
  segment: number;
  quantity: number;
  fence: number;
}

/**
 * Gives units back to segments under their locks, fenced like every other write (the row must not carry a newer
 * token than ours), and records each in the ledger's `stock_returns`, whose key refuses a second return of one
 * order's units to one segment. Returns how many segment rows were written: fewer than asked means a lock was lost
 * or the layout changed, and the caller rolls back.
 */
export async function giveBack(
  trx: Trx,
  orderId: string,
  reason: 'cancelled' | 'expired',
  units: readonly UnitsBack[],
): Promise<number> {
  const { rows } = await sql<{ written: number }>`
    with written as (
      update stock_segments s
         set available = s.available + u.quantity, fence_token = u.fence
        from unnest(${units.map((u) => u.skuId)}::int[], ${units.map((u) => u.layoutVersion)}::int[],
                    ${units.map((u) => u.segment)}::int[], ${units.map((u) => u.quantity)}::bigint[],
                    ${units.map((u) => u.fence)}::bigint[]) as u(sku_id, layout_version, segment, quantity, fence)
       where s.sku_id = u.sku_id and s.layout_version = u.layout_version and s.segment = u.segment
         and s.fence_token < u.fence
      returning s.sku_id, s.layout_version, s.segment, u.quantity, u.fence
    ), ledger as (
      insert into stock_returns (order_id, sku_id, segment, layout_version, quantity, fence_token, reason)
      select ${orderId}::uuid, sku_id, segment, layout_version, quantity, fence, ${reason} from written
    )
    select count(*)::int as written from written`.execute(trx);
  return rows[0]!.written;
}

/** Reservations whose hold ran out, soonest first. */
export async function findDueReservations(db: Db, limit: number): Promise<string[]> {
  const { rows } = await sql<{ id: string }>`
    select id from orders where status = 'reserved' and expires_at <= now()
     order by expires_at limit ${limit}`.execute(db);
  return rows.map((row) => row.id);
}
