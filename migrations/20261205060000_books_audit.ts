import { type Kysely, sql } from 'kysely';

// Frozen in time: this migration imports nothing from src/.

/**
 * The books audit's state (src/audit/): what it has checked and what it found.
 *
 * - `orders_sku_idx`: one SKU's orders, so that checking a SKU's orders against their ledger reads that SKU's orders,
 *   not the whole table. Carts (no `sku_id`) have no entry. `if not exists`: on a large table, build it beforehand with
 *   `create index concurrently` (docs/operations.md, *The books audit*) and this keeps it.
 * - `audit_state`: one row: the audit's place in the event feed (SKUs changed since), its place in the sweep over every
 *   SKU, and when the last pass and the last full sweep ran.
 * - `audit_findings`: per SKU whose books are off, what is off and the figures read; a SKU checked balanced loses its
 *   row.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`create index if not exists orders_sku_idx on orders (sku_id) where sku_id is not null`.execute(db);
  await db.schema
    .createTable('audit_state')
    .addColumn('id', 'smallint', (c) => c.primaryKey().check(sql`id = 1`))
    .addColumn('feed_position', 'bigint', (c) => c.notNull().defaultTo(0))
    .addColumn('sweep_after', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('sweep_started_at', 'timestamptz')
    .addColumn('last_pass_at', 'timestamptz')
    .addColumn('last_full_pass_started_at', 'timestamptz')
    .addColumn('last_full_pass_at', 'timestamptz')
    .execute();
  await sql`insert into audit_state (id) values (1)`.execute(db);
  await db.schema
    .createTable('audit_findings')
    .addColumn('sku_id', 'integer', (c) => c.primaryKey())
    .addColumn('sku', 'text', (c) => c.notNull())
    .addColumn('problems', 'jsonb', (c) => c.notNull())
    .addColumn('books', 'jsonb', (c) => c.notNull())
    .addColumn('found_at', 'timestamptz', (c) => c.notNull())
    .addColumn('checked_at', 'timestamptz', (c) => c.notNull())
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('audit_findings').execute();
  await db.schema.dropTable('audit_state').execute();
  await sql`drop index orders_sku_idx`.execute(db);
}
