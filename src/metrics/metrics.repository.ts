import type { Db } from '../db/database.js';
import type { SkuAvailable } from './service-metrics.js';

/** Units available per SKU, newest SKUs first, at most `limit` of them (a gauge series per SKU must stay bounded). */
export async function readAvailableBySku(db: Db, limit: number): Promise<SkuAvailable[]> {
  const rows = await db
    .selectFrom('skus')
    .leftJoin('stock_segments', 'stock_segments.sku_id', 'skus.id')
    .select((eb) => [
      'skus.sku',
      eb.fn.coalesce(eb.fn.sum<number>('stock_segments.available'), eb.lit(0)).as('available'),
    ])
    .groupBy(['skus.id', 'skus.sku'])
    .orderBy('skus.id', 'desc')
    .limit(limit)
    .execute();
  return rows.map((row) => ({ sku: row.sku, available: Number(row.available) }));
}
