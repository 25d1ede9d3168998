import { type Kysely, sql } from 'kysely';

// Frozen in time: this migration imports nothing from src/.

/**
 * `stock_returns`' foreign keys to `orders` and `skus` go. Its writers (src/reservations) insert a row only for an
 * order whose row they have just locked and ended in the same transaction, for a SKU taken from that order's ledger
 * rows; no order or SKU is ever deleted. The keys repeated that with two lookups per row returned: when a drop's
 * reservations run out by the thousand in one second, most of what a batch of expiries cost, paid under the segment
 * locks that the SKU's orders wait for. The primary key, which refuses a second return, stays.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`alter table stock_returns drop constraint stock_returns_order_id_fkey`.execute(db);
  await sql`alter table stock_returns drop constraint stock_returns_sku_id_fkey`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`alter table stock_returns add constraint stock_returns_sku_id_fkey foreign key (sku_id) references skus (id)`.execute(
    db,
  );
  await sql`alter table stock_returns
    add constraint stock_returns_order_id_fkey foreign key (order_id) references orders (id)`.execute(db);
}
