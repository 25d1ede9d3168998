import type { Db } from '../db/database.js';
import type { SkuAvailable } from './service-metrics.js';

/**
 * The newest `limit` SKUs with their units available (Σ of their segments), newest first (a gauge series per SKU must
 * stay bounded). The SKUs come from the primary key backwards, each SKU's sum from its own segments: for a join and
 * grouping of both tables the planner may sum the segments of the whole catalogue before keeping `limit` of them (it
 * did, before the tables had statistics). Exported for the test of its plan.
 */
export function availableBySku(db: Db, limit: number) {
  return db
    .selectFrom('skus')
    .select((eb) => [
      'skus.sku',
      eb
        .selectFrom('stock_segments')
        .select((s) => s.fn.coalesce(s.fn.sum<number>('stock_segments.available'), s.lit(0)).as('available'))
        .whereRef('stock_segments.sku_id', '=', 'skus.id')
        .as('available'),
    ])
    .orderBy('skus.id', 'desc')
    .limit(limit);
}

/** The newest `limit` SKUs' units available, for the per-SKU gauge and the dashboard. */
export async function readAvailableBySku(db: Db, limit: number): Promise<SkuAvailable[]> {
  const rows = await availableBySku(db, limit).execute();
  return rows.map((row) => ({ sku: row.sku, available: Number(row.available) }));
}
