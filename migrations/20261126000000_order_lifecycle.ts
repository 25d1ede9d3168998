import { type Kysely, sql } from 'kysely';

// Frozen in time: this migration imports nothing from src/.

/**
 * The order lifecycle: orders that hold stock until confirmed, cancelled or expired; carts spanning several SKUs;
 * per-customer limits.
 *
 * - `orders.status`: reserved → confirmed | cancelled | expired, confirmed → cancelled. Existing orders were final
 *   when placed: confirmed. A cart has no single SKU (`sku_id` null); its SKUs are in its ledger rows.
 * - `stock_segments.reserved` beside `sold`: running totals of units in live reservations and in confirmed orders,
 *   so the SKU view stays O(segments); `skus.reserved_in_earlier_layouts` keeps what replaced layouts held.
 * - `stock_returns`: the other half of the ledger, one row per segment that units went back to. Its key makes a
 *   second return of the same order's units to the same segment impossible.
 * - `customer_holdings`: units of each customer's live orders per limited SKU, checked and counted in the order's own
 *   transaction.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .alterTable('orders')
    .addColumn('status', 'text', (c) =>
      c
        .notNull()
        .defaultTo('confirmed')
        .check(sql`status in ('reserved', 'confirmed', 'cancelled', 'expired')`),
    )
    .addColumn('customer_id', 'text')
    .addColumn('expires_at', 'timestamptz')
    .execute();
  await sql`alter table orders alter column sku_id drop not null`.execute(db);
  // What the expiry sweep reads: only live reservations, soonest first.
  await sql`create index orders_due_idx on orders (expires_at) where status = 'reserved'`.execute(db);
  // A customer's orders, newest first, for the paged listing.
  await sql`create index orders_customer_idx on orders (customer_id, created_at desc, id desc)
              where customer_id is not null`.execute(db);

  // A cart takes from several SKUs, and their segment numbers repeat.
  await sql`alter table stock_deductions drop constraint stock_deductions_pkey`.execute(db);
  await sql`alter table stock_deductions add constraint stock_deductions_pkey primary key (order_id, sku_id, segment)`.execute(
    db,
  );

  await db.schema
    .alterTable('stock_segments')
    .addColumn('reserved', 'bigint', (c) => c.notNull().defaultTo(0))
    .execute();
  await db.schema
    .alterTable('skus')
    .addColumn('reserved_in_earlier_layouts', 'bigint', (c) => c.notNull().defaultTo(0))
    .addColumn('max_per_customer', 'bigint', (c) => c.check(sql`max_per_customer between 1 and 1000000`))
    .execute();

  await db.schema
    .createTable('stock_returns')
    .addColumn('order_id', 'uuid', (c) => c.notNull().references('orders.id'))
    .addColumn('sku_id', 'integer', (c) => c.notNull().references('skus.id'))
    .addColumn('segment', 'integer', (c) => c.notNull())
    .addColumn('layout_version', 'integer', (c) => c.notNull())
    .addColumn('quantity', 'bigint', (c) => c.notNull().check(sql`quantity > 0`))
    .addColumn('fence_token', 'bigint', (c) => c.notNull())
    .addColumn('reason', 'text', (c) => c.notNull().check(sql`reason in ('cancelled', 'expired')`))
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addPrimaryKeyConstraint('stock_returns_pkey', ['order_id', 'sku_id', 'segment'])
    .execute();
  await db.schema.createIndex('stock_returns_sku_id_idx').on('stock_returns').columns(['sku_id', 'quantity']).execute();

  await db.schema
    .createTable('customer_holdings')
    .addColumn('sku_id', 'integer', (c) => c.notNull().references('skus.id'))
    .addColumn('customer_id', 'text', (c) => c.notNull())
    .addColumn('units', 'bigint', (c) => c.notNull().check(sql`units >= 0`))
    .addPrimaryKeyConstraint('customer_holdings_pkey', ['sku_id', 'customer_id'])
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('customer_holdings').ifExists().execute();
  await db.schema.dropTable('stock_returns').ifExists().execute();
  await db.schema.alterTable('skus').dropColumn('max_per_customer').dropColumn('reserved_in_earlier_layouts').execute();
  await db.schema.alterTable('stock_segments').dropColumn('reserved').execute();
  await sql`alter table stock_deductions drop constraint stock_deductions_pkey`.execute(db);
  await sql`alter table stock_deductions add constraint stock_deductions_pkey primary key (order_id, segment)`.execute(
    db,
  );
  await sql`delete from stock_deductions where order_id in (select id from orders where sku_id is null)`.execute(db);
  await sql`delete from orders where sku_id is null`.execute(db);
  await sql`alter table orders alter column sku_id set not null`.execute(db);
  await db.schema
    .alterTable('orders')
    .dropColumn('status')
    .dropColumn('customer_id')
    .dropColumn('expires_at')
    .execute();
}
