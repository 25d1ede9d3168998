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

export async function setOrderStatus(trx: Trx, orderId: string, status: 'cancelled' | 'expired'): Promise<void> {
  await sql`update orders set status = ${status} where id = ${orderId}`.execute(trx);
}

/**
 * Takes a returned order's units off the running total they sat in (`reserved` or `sold`; they go back to
 * `available` separately). Segments of the current layout carry their own totals; units taken from a replaced layout
 * are counted on the SKU row, where re-segmentation moved them. Two statements, in this order, so a re-segmentation
 * racing this one is seen whichever way it went: the first waits for it and then finds its rows gone, and the second,
 * with a fresh snapshot, counts those units on the SKU row.
 */
export async function takeOffRunningTotal(trx: Trx, orderId: string, from: 'reserved' | 'sold'): Promise<void> {
  const segmentColumn = sql.raw(from === 'reserved' ? 'reserved = s.reserved' : 'sold = s.sold');
  await sql`
    update stock_segments s set ${segmentColumn} - d.quantity
      from stock_deductions d
     where d.order_id = ${orderId}
       and s.sku_id = d.sku_id and s.layout_version = d.layout_version and s.segment = d.segment`.execute(trx);
  const skuColumn = sql.raw(
    from === 'reserved'
      ? 'reserved_in_earlier_layouts = k.reserved_in_earlier_layouts'
      : 'sold_in_earlier_layouts = k.sold_in_earlier_layouts',
  );
  await sql`
    update skus k set ${skuColumn} - x.quantity
      from (select d.sku_id, sum(d.quantity) as quantity from stock_deductions d
             where d.order_id = ${orderId}
               and not exists (select 1 from stock_segments s where s.sku_id = d.sku_id
                                  and s.layout_version = d.layout_version and s.segment = d.segment)
             group by d.sku_id) x
     where k.id = x.sku_id`.execute(trx);
}

/**
 * Confirms a live reservation in one statement: the status, and its units moved from `reserved` to `sold` in the
 * running totals — on the segments they came from while those are the current layout's, else on the SKU row where
 * re-segmentation moved them. One statement, so the segment rows are locked only for its own short commit, never
 * across round trips while the segments' holders wait to write. A re-segmentation racing it is seen whichever way it
 * went: an update that waited for it finds the segment rows gone and counts on the SKU row instead, whose relative
 * update applies to the row's latest version. False when the order is not a live reservation.
 */
export async function confirmReservation(db: Db, orderId: string): Promise<boolean> {
  const { rows } = await sql<{ confirmed: number }>`
    with changed as (
      update orders set status = 'confirmed'
       where id = ${orderId} and status = 'reserved' and expires_at > now()
      returning id
    ), taken as (
      select d.sku_id, d.layout_version, d.segment, d.quantity from stock_deductions d
       where d.order_id = (select id from changed)
    ), on_segments as (
      update stock_segments s set reserved = s.reserved - t.quantity, sold = s.sold + t.quantity
        from taken t
       where s.sku_id = t.sku_id and s.layout_version = t.layout_version and s.segment = t.segment
      returning s.sku_id, s.segment
    ), on_skus as (
      update skus k set reserved_in_earlier_layouts = k.reserved_in_earlier_layouts - x.quantity,
                        sold_in_earlier_layouts = k.sold_in_earlier_layouts + x.quantity
        from (select t.sku_id, sum(t.quantity) as quantity from taken t
               where not exists (select 1 from on_segments o where o.sku_id = t.sku_id and o.segment = t.segment)
               group by t.sku_id) x
       where k.id = x.sku_id
    )
    select count(*)::int as confirmed from changed`.execute(db);
  return rows[0]!.confirmed === 1;
}

/** The order's status, unlocked; `due` when a reservation's hold has run out. */
export async function readOrderStatus(
  db: Db,
  orderId: string,
): Promise<{ status: OrderStatus; due: boolean } | undefined> {
  const { rows } = await sql<{ status: OrderStatus; due: boolean }>`
    select status, coalesce(expires_at <= now(), false) as due from orders where id = ${orderId}`.execute(db);
  return rows[0];
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
