import { type Kysely, sql } from 'kysely';

// Frozen in time: this migration imports nothing from src/.

/**
 * What each order costs Postgres beyond its own rows, cut down.
 *
 * The order path's foreign keys go: `orders.sku_id` and `stock_deductions.sku_id` to `skus`, and
 * `stock_deductions.order_id` to `orders`. The batch statement (src/inventory/order-writes.ts) is the only writer of
 * both tables, and takes each SKU and order from rows it has just locked (the SKU's segments) or inserted (the order)
 * in the same statement; no SKU or order is ever deleted. The keys repeated that guarantee at a price: each inserted
 * row locked its SKU's row (`select … for key share`), so every concurrent batch of one hot SKU locked the same `skus`
 * row and Postgres turned those shared locks into a new multixact each time — about 13 µs of Postgres CPU per order
 * on one hot SKU. The books checker (test/support/invariants.ts) counts ledger rows without their order instead.
 *
 * The orders' unique index on `idempotency_key` covers only the orders that have one (as the customer index does): a
 * null was an index entry written with every order placed without a key, found by no lookup.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`alter table orders drop constraint orders_sku_id_fkey`.execute(db);
  await sql`alter table stock_deductions
    drop constraint stock_deductions_order_id_fkey,
    drop constraint stock_deductions_sku_id_fkey`.execute(db);
  await sql`create unique index orders_idempotency_key_idx on orders (idempotency_key) where idempotency_key is not null`.execute(
    db,
  );
  await sql`alter table orders drop constraint orders_idempotency_key_key`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`alter table orders add constraint orders_idempotency_key_key unique (idempotency_key)`.execute(db);
  await sql`drop index orders_idempotency_key_idx`.execute(db);
  await sql`alter table orders add constraint orders_sku_id_fkey foreign key (sku_id) references skus (id)`.execute(db);
  await sql`alter table stock_deductions
    add constraint stock_deductions_order_id_fkey foreign key (order_id) references orders (id),
    add constraint stock_deductions_sku_id_fkey foreign key (sku_id) references skus (id)`.execute(db);
}
