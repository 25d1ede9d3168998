import { sql } from 'kysely';
import type { Db } from '../../src/db/database.js';

export interface StockAudit {
  totalStock: number;
  available: number;
  sold: number;
  ledgerOrders: number;
  negativeSegments: number;
  ordersWithoutLedger: number;
  ordersLedgerMismatch: number;
}

/** Reads a SKU's books straight from Postgres, bypassing the service. */
export async function auditSku(db: Db, sku: string): Promise<StockAudit> {
  const { rows } = await sql<StockAudit>`
    select s.total_stock as "totalStock",
           (select coalesce(sum(available), 0) from stock_segments where sku_id = s.id)::bigint as "available",
           (select coalesce(sum(quantity), 0) from stock_deductions where sku_id = s.id)::bigint as "sold",
           (select count(distinct order_id) from stock_deductions where sku_id = s.id)::int as "ledgerOrders",
           (select count(*) from stock_segments where sku_id = s.id and available < 0)::int as "negativeSegments",
           (select count(*) from orders o where o.sku_id = s.id
              and not exists (select 1 from stock_deductions d where d.order_id = o.id))::int as "ordersWithoutLedger",
           (select count(*) from orders o where o.sku_id = s.id
              and o.quantity <> (select coalesce(sum(d.quantity), 0) from stock_deductions d where d.order_id = o.id))::int
             as "ordersLedgerMismatch"
      from skus s where s.sku = ${sku}`.execute(db);
  if (!rows[0]) throw new Error(`no SKU ${sku}`);
  return Object.fromEntries(Object.entries(rows[0]).map(([k, v]) => [k, Number(v)])) as unknown as StockAudit;
}
