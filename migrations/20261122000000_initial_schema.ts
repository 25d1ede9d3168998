import { type Kysely, sql } from 'kysely';

// Frozen in time: this migration imports nothing from src/.

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('skus')
    .addColumn('id', 'serial', (c) => c.primaryKey())
    .addColumn('sku', 'text', (c) => c.notNull().unique())
    .addColumn('segment_count', 'integer', (c) => c.notNull().check(sql`segment_count between 1 and 1024`))
    .addColumn('layout_version', 'integer', (c) => c.notNull().defaultTo(1))
    .addColumn('total_stock', 'bigint', (c) => c.notNull().check(sql`total_stock >= 0`))
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute();

  await db.schema
    .createTable('stock_segments')
    .addColumn('sku_id', 'integer', (c) => c.notNull().references('skus.id'))
    .addColumn('segment', 'integer', (c) => c.notNull().check(sql`segment >= 0`))
    .addColumn('layout_version', 'integer', (c) => c.notNull())
    .addColumn('available', 'bigint', (c) => c.notNull().check(sql`available >= 0`))
    .addColumn('fence_token', 'bigint', (c) => c.notNull().defaultTo(0))
    .addPrimaryKeyConstraint('stock_segments_pkey', ['sku_id', 'segment'])
    .execute();

  await db.schema
    .createTable('stock_additions')
    .addColumn('id', 'bigserial', (c) => c.primaryKey())
    .addColumn('sku_id', 'integer', (c) => c.notNull().references('skus.id'))
    .addColumn('quantity', 'bigint', (c) => c.notNull().check(sql`quantity >= 0`))
    .addColumn('reason', 'text', (c) => c.notNull())
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
  await db.schema.createIndex('stock_additions_sku_id_idx').on('stock_additions').column('sku_id').execute();

  await db.schema
    .createTable('orders')
    .addColumn('id', 'uuid', (c) => c.primaryKey())
    .addColumn('sku_id', 'integer', (c) => c.notNull().references('skus.id'))
    .addColumn('quantity', 'bigint', (c) => c.notNull().check(sql`quantity > 0`))
    .addColumn('idempotency_key', 'text', (c) => c.unique())
    .addColumn('request_fingerprint', 'text')
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute();

  await db.schema
    .createTable('stock_deductions')
    .addColumn('order_id', 'uuid', (c) => c.notNull().references('orders.id'))
    .addColumn('sku_id', 'integer', (c) => c.notNull().references('skus.id'))
    .addColumn('segment', 'integer', (c) => c.notNull())
    .addColumn('layout_version', 'integer', (c) => c.notNull())
    .addColumn('quantity', 'bigint', (c) => c.notNull().check(sql`quantity > 0`))
    .addColumn('fence_token', 'bigint', (c) => c.notNull())
    .addPrimaryKeyConstraint('stock_deductions_pkey', ['order_id', 'segment'])
    .execute();
  // Sold-per-SKU sums read only this index.
  await db.schema
    .createIndex('stock_deductions_sku_id_idx')
    .on('stock_deductions')
    .columns(['sku_id', 'quantity'])
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const table of ['stock_deductions', 'orders', 'stock_additions', 'stock_segments', 'skus']) {
    await db.schema.dropTable(table).ifExists().execute();
  }
}
