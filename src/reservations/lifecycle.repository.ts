import { sql, type Transaction } from 'kysely';
import type { Db } from '../db/database.js';
import type { Database, OrderStatus } from '../db/schema.js';
import { OUTBOX_INSERT } from '../events/outbox.js';
import { FENCE_GUARD } from '../inventory/fence-guard.js';

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

/**
 * The order's status, locked for the rest of the transaction; `due` when a reservation's hold has run out;
 * `confirmedSlot`, the confirmation counter a confirmed reservation was counted in.
 */
export async function lockOrderStatus(
  trx: Trx,
  orderId: string,
): Promise<{ status: OrderStatus; due: boolean; customerId: string | null; confirmedSlot: number | null } | undefined> {
  const { rows } = await sql<{
    status: OrderStatus;
    due: boolean;
    customer_id: string | null;
    confirmed_slot: number | null;
  }>`
    select status, coalesce(expires_at <= now(), false) as due, customer_id, confirmed_slot
      from orders where id = ${orderId} for update`.execute(trx);
  const row = rows[0];
  return row && { status: row.status, due: row.due, customerId: row.customer_id, confirmedSlot: row.confirmed_slot };
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
 * Confirms the live reservations among `orderIds` in one statement: their status, and their units added to one of
 * each SKU's confirmation counters (`slot`, kept on the orders so that a cancel takes them off the same row). The
 * units stay counted in the segments' `reserved`: a confirm never touches the segment rows that every lock holder
 * writes, and so never queues behind the holders' batch writes, nor they behind it. Rows are locked in one global
 * order, orders by id and then counters by SKU, as a cancel locks them too, so concurrent batches cannot deadlock.
 * Answers the ids it confirmed; the others were not live reservations. With `events`, each confirmed order writes one
 * `order.confirmed` event per SKU into the outbox, in the same statement.
 */
export async function confirmReservations(
  db: Db,
  orderIds: readonly string[],
  slot: number,
  events: boolean,
): Promise<Set<string>> {
  const { rows } = await sql<{ id: string }>`
    with locked as (
      select id from orders where id = any(${orderIds}::uuid[]) order by id for update
    ), changed as (
      update orders o set status = 'confirmed', confirmed_slot = ${slot}
        from locked l
       where o.id = l.id and o.status = 'reserved' and o.expires_at > now()
      returning o.id
    ), counted as (
      insert into reservation_confirmations (sku_id, slot, units)
      select d.sku_id, ${slot}, sum(d.quantity) from stock_deductions d
       where d.order_id in (select id from changed)
       group by d.sku_id
       order by d.sku_id
      on conflict (sku_id, slot) do update set units = reservation_confirmations.units + excluded.units
    ), events as (
      ${sql.raw(OUTBOX_INSERT)}
      select d.sku_id, 'order.confirmed',
             jsonb_build_object('order', jsonb_build_object('orderId', d.order_id, 'status', 'confirmed',
                                                            'quantity', sum(d.quantity))),
             0, -sum(d.quantity), sum(d.quantity), now()
        from stock_deductions d
       where ${events} and d.order_id in (select id from changed)
       group by d.sku_id, d.order_id
    )
    select id from changed`.execute(db);
  return new Set(rows.map((row) => row.id));
}

/**
 * Takes a cancelled confirmed reservation's units off the confirmation counters it was counted in: one statement per
 * SKU, in SKU order like the confirm, so that carts cannot deadlock on the counter rows.
 */
export async function uncountConfirmation(trx: Trx, slot: number, taken: readonly TakenUnits[]): Promise<void> {
  const bySku = new Map<number, number>();
  for (const t of taken) bySku.set(t.skuId, (bySku.get(t.skuId) ?? 0) + t.quantity);
  for (const [skuId, quantity] of [...bySku].sort(([a], [b]) => a - b)) {
    await sql`
      update reservation_confirmations set units = units - ${quantity}
       where sku_id = ${skuId} and slot = ${slot}`.execute(trx);
  }
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
         set available = s.available + w.quantity, fence_token = w.fence
        from unnest(${units.map((u) => u.skuId)}::int[], ${units.map((u) => u.layoutVersion)}::int[],
                    ${units.map((u) => u.segment)}::int[], ${units.map((u) => u.quantity)}::bigint[],
                    ${units.map((u) => u.fence)}::bigint[]) as w(sku_id, layout_version, segment, quantity, fence)
       where s.sku_id = w.sku_id and s.layout_version = w.layout_version and s.segment = w.segment
         and ${sql.raw(FENCE_GUARD)}
      returning s.sku_id, s.layout_version, s.segment, w.quantity, w.fence
    ), ledger as (
      insert into stock_returns (order_id, sku_id, segment, layout_version, quantity, fence_token, reason)
      select ${orderId}::uuid, sku_id, segment, layout_version, quantity, fence, ${reason} from written
    )
    select count(*)::int as written from written`.execute(trx);
  return rows[0]!.written;
}

/** A ledger row of a reservation whose hold ran out, with the order's customer. */
export interface DueUnits extends TakenUnits {
  orderId: string;
  customerId: string | null;
}

/** The ledger rows of up to `limit` reservations whose hold ran out, soonest first. */
export async function findDueReservations(db: Db, limit: number): Promise<DueUnits[]> {
  const { rows } = await sql<DueUnits>`
    with due as (
      select id, customer_id from orders where status = 'reserved' and expires_at <= now()
       order by expires_at limit ${limit}
    )
    select d.order_id as "orderId", o.customer_id as "customerId", d.sku_id as "skuId", k.sku,
           d.layout_version as "layoutVersion", d.segment, d.quantity
      from due o join stock_deductions d on d.order_id = o.id join skus k on k.id = d.sku_id`.execute(db);
  return rows.map((row) => ({ ...row, quantity: Number(row.quantity) }));
}

/** A segment of the current layout that expired units go back to, and the fencing token of its lock's holder. */
export interface SegmentFence {
  skuId: number;
  layoutVersion: number;
  segment: number;
  fence: number;
}

/**
 * Expires those of `orderIds` that are still reservations past their hold, in one statement, under the locks of the
 * segments their units go back to (`fences`, every segment any of them took from; each order's units all taken from
 * its SKU's current layout; a segment without a fence is never written): their status, their units back to the segments they came from (`available` up,
 * `reserved` down, fenced like every write), a `stock_returns` row for each order's share of each segment, their
 * customers' holdings down, and with `events` an `order.expired` event per order and SKU, as a cancel writes them.
 * Order rows are locked in id order, as confirms lock them, so the two cannot deadlock; an order a confirm, a cancel
 * or another instance's sweep ended first is left alone. Answers how many orders expired, and how many segment rows
 * were to be written and were: fewer written means a lock was lost or the layout changed, and the caller rolls back.
 */
export async function expireReservations(
  trx: Trx,
  orderIds: readonly string[],
  fences: readonly SegmentFence[],
  events: boolean,
): Promise<{ expired: number; segments: number; written: number }> {
  const { rows } = await sql<{ expired: number; segments: number; written: number }>`
    with ended as (
      select id, customer_id from orders
       where id = any(${orderIds}::uuid[]) and status = 'reserved' and expires_at <= now()
       order by id for update
    ), expired as (
      update orders o set status = 'expired' from ended e where o.id = e.id returning o.id, e.customer_id
    ), taken as (
      select d.order_id, d.sku_id, d.layout_version, d.segment, d.quantity, x.customer_id
        from expired x join stock_deductions d on d.order_id = x.id
    ), fences as (
      select * from unnest(${fences.map((f) => f.skuId)}::int[], ${fences.map((f) => f.layoutVersion)}::int[],
                           ${fences.map((f) => f.segment)}::int[], ${fences.map((f) => f.fence)}::bigint[])
               as f(sku_id, layout_version, segment, fence)
    ), back as (
      select t.sku_id, t.layout_version, t.segment, sum(t.quantity) as quantity, f.fence
        from taken t left join fences f using (sku_id, layout_version, segment)
       group by t.sku_id, t.layout_version, t.segment, f.fence
    ), written as (
      update stock_segments s
         set available = s.available + w.quantity, reserved = s.reserved - w.quantity, fence_token = w.fence
        from back w
       where s.sku_id = w.sku_id and s.layout_version = w.layout_version and s.segment = w.segment
         and ${sql.raw(FENCE_GUARD)}
      returning s.segment
    ), ledger as (
      insert into stock_returns (order_id, sku_id, segment, layout_version, quantity, fence_token, reason)
      select t.order_id, t.sku_id, t.segment, t.layout_version, t.quantity, b.fence, 'expired'
        from taken t join back b using (sku_id, layout_version, segment)
    ), held as (
      select t.sku_id, t.customer_id, sum(t.quantity) as units from taken t
       where t.customer_id is not null group by t.sku_id, t.customer_id
    ), locked_holdings as (
      select h.sku_id, h.customer_id from customer_holdings h join held using (sku_id, customer_id)
       order by h.sku_id, h.customer_id for update of h
    ), released as (
      update customer_holdings h set units = greatest(h.units - held.units, 0)
        from held join locked_holdings l using (sku_id, customer_id)
       where h.sku_id = held.sku_id and h.customer_id = held.customer_id
    ), events as (
      ${sql.raw(OUTBOX_INSERT)}
      select t.sku_id, 'order.expired',
             jsonb_build_object('order', jsonb_build_object('orderId', t.order_id, 'status', 'expired',
                                                            'previousStatus', 'reserved', 'quantity', sum(t.quantity))),
             sum(t.quantity), -sum(t.quantity), 0, now()
        from taken t
       where ${events}
       group by t.sku_id, t.order_id
    )
    select (select count(*) from expired)::int as expired, (select count(*) from back)::int as segments,
           (select count(*) from written)::int as written`.execute(trx);
  return rows[0]!;
}
