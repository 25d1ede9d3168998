import { type Kysely, sql } from 'kysely';

// Frozen in time: this migration imports nothing from src/.

/**
 * `GET /skus/:sku/movements` reads a SKU's history newest first from the three tables that already record it:
 * `stock_additions`, `stock_deductions` and `stock_returns`. Each gets an index on (SKU, kind, time) that replaces its
 * index on the SKU alone, so a page reads about `limit` entries per kind wherever it starts, however long the ledger
 * grows, and every order still writes one index entry per table. Each index includes `quantity`, so the books audit's
 * sums over a SKU still read the index alone.
 *
 * - `stock_deductions.created_at`: when the order took the units (the order statement's `now()`, as the order's own
 *   `created_at`: the ledger rows and the order are written by one statement). Rows written before take their
 *   order's time; a row without its order (the books audit reports those) takes the migration's.
 * - `stock_additions.kind`: rows of writers that predate the column get their kind from `reason` (as the migration
 *   that added it did), so that every row sits under its kind in the index.
 *
 * `if not exists`, and only rows still undated are dated: on a large ledger, add and fill the column and build the
 * indexes beforehand, online (docs/operations.md, *The movement history*); this then keeps them and dates only the
 * ledger rows written since, instead of blocking order writes while it rewrites the whole ledger.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`update stock_additions set kind = reason where kind is null`.execute(db);
  await sql`create index if not exists stock_additions_history_idx
    on stock_additions (sku_id, kind, created_at, id) include (quantity)`.execute(db);
  await sql`drop index if exists stock_additions_sku_id_idx`.execute(db);

  await sql`alter table stock_deductions add column if not exists created_at timestamptz`.execute(db);
  await sql`update stock_deductions d
    set created_at = coalesce((select o.created_at from orders o where o.id = d.order_id), now())
    where created_at is null`.execute(db);
  await sql`alter table stock_deductions alter column created_at set default now(),
    alter column created_at set not null`.execute(db);
  await sql`create index if not exists stock_deductions_history_idx
    on stock_deductions (sku_id, created_at, order_id) include (quantity)`.execute(db);
  await sql`drop index if exists stock_deductions_sku_id_idx`.execute(db);

  await sql`create index if not exists stock_returns_history_idx
    on stock_returns (sku_id, reason, created_at, order_id) include (quantity)`.execute(db);
  await sql`drop index if exists stock_returns_sku_id_idx`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await sql`create index stock_returns_sku_id_idx on stock_returns (sku_id, quantity)`.execute(db);
  await sql`drop index stock_returns_history_idx`.execute(db);
  await sql`create index stock_deductions_sku_id_idx on stock_deductions (sku_id, quantity)`.execute(db);
  await sql`drop index stock_deductions_history_idx`.execute(db);
  await sql`alter table stock_deductions drop column created_at`.execute(db);
  await sql`create index stock_additions_sku_id_idx on stock_additions (sku_id)`.execute(db);
  await sql`drop index stock_additions_history_idx`.execute(db);
}
