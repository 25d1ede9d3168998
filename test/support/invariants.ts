import type { Db } from '../../src/db/database.js';
import { auditStock, type StockAudit } from '../../src/inventory/inventory.repository.js';

export type { StockAudit };

/** Reads a SKU's books straight from Postgres, bypassing the service; the SKU must exist. */
export async function auditSku(db: Db, sku: string): Promise<StockAudit> {
  const audit = await auditStock(db, sku);
  if (!audit) throw new Error(`no SKU ${sku}`);
  return audit;
}
