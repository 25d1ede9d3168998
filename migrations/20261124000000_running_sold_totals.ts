import { type Kysely, sql } from 'kysely';

// Frozen in time: this migration imports nothing from src/.

/**
 * Running totals of units sold, so that reading a SKU costs O(segments) however long its ledger grows: each segment
 * row counts what was sold from it (the order's own statement adds to it), and the SKU row keeps what segments of
 * earlier layouts sold (re-segmentation moves it there). The ledger stays the audit trail; the totals are seeded
 * from it here and checked against it by the audit.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .alterTable('stock_segments')
    .addColumn('sold', 'bigint', (c) => c.notNull().defaultTo(0))
    .execute();
  await db.schema
    .alterTable('skus')
    .addColumn('sold_in_earlier_layouts', 'bigint', (c) => c.notNull().defaultTo(0))
    .execute();
  await sql`
    update stock_segments s set sold = d.sold
      from (select sku_id, layout_version, segment, sum(quantity) as sold
              from stock_deductions group by sku_id, layout_version, segment) d
     where d.sku_id = s.sku_id and d.layout_version = s.layout_version and d.segment = s.segment`.execute(db);
  await sql`
    update skus k set sold_in_earlier_layouts = d.sold
      from (select d.sku_id, sum(d.quantity) as sold
              from stock_deductions d join skus k2 on k2.id = d.sku_id
             where d.layout_version < k2.layout_version group by d.sku_id) d
     where d.sku_id = k.id`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('stock_segments').dropColumn('sold').execute();
  await db.schema.alterTable('skus').dropColumn('sold_in_earlier_layouts').execute();
}
