import { type Kysely, sql } from 'kysely';

// Frozen in time: this migration imports nothing from src/.

/**
 * Confirmations counted off the hot segment rows. A confirm used to move its units from `reserved` to `sold` on the
 * segments they came from: the very rows every lock holder writes, so confirms and the holders' batch writes queued
 * behind each other's row locks. From now on a confirmed reservation's units stay counted in the segments' (or the
 * SKU's earlier layouts') `reserved`, and the confirm adds them to one of a few counter rows of the SKU instead:
 *
 *   sold     = sold_in_earlier_layouts     + Σ segments.sold     + Σ reservation_confirmations.units
 *   reserved = reserved_in_earlier_layouts + Σ segments.reserved − Σ reservation_confirmations.units
 *
 * `orders.confirmed_slot` says which counter row an order was counted in, so a cancel takes its units off that same
 * row. Null for every order confirmed before this migration (and for orders placed without a hold): their units are
 * in `sold`, as before.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('reservation_confirmations')
    .addColumn('sku_id', 'integer', (c) => c.notNull().references('skus.id'))
    .addColumn('slot', 'smallint', (c) => c.notNull())
    .addColumn('units', 'bigint', (c) => c.notNull().check(sql`units >= 0`))
    .addPrimaryKeyConstraint('reservation_confirmations_pkey', ['sku_id', 'slot'])
    .execute();
  await db.schema.alterTable('orders').addColumn('confirmed_slot', 'smallint').execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  // Back to counting confirmations on the segments: each counted order's units move from `reserved` to `sold` where
  // they sit (the current layout's segments, else the SKU row).
  await sql`
    with counted as (
      select d.sku_id, d.layout_version, d.segment, d.quantity from stock_deductions d
        join orders o on o.id = d.order_id
       where o.status = 'confirmed' and o.confirmed_slot is not null
    ), on_segments as (
      update stock_segments s set reserved = s.reserved - c.quantity, sold = s.sold + c.quantity
        from (select sku_id, layout_version, segment, sum(quantity) as quantity from counted
               group by sku_id, layout_version, segment) c
       where s.sku_id = c.sku_id and s.layout_version = c.layout_version and s.segment = c.segment
      returning s.sku_id, s.layout_version, s.segment
    )
    update skus k set reserved_in_earlier_layouts = k.reserved_in_earlier_layouts - x.quantity,
                      sold_in_earlier_layouts = k.sold_in_earlier_layouts + x.quantity
      from (select c.sku_id, sum(c.quantity) as quantity from counted c
             where not exists (select 1 from stock_segments s where s.sku_id = c.sku_id
                                 and s.layout_version = c.layout_version and s.segment = c.segment)
             group by c.sku_id) x
     where k.id = x.sku_id`.execute(db);
  await db.schema.alterTable('orders').dropColumn('confirmed_slot').execute();
  await db.schema.dropTable('reservation_confirmations').execute();
}
