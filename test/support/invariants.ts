import type { Db } from '../../src/db/database.js';
import { auditStock, type StockAudit } from '../../src/inventory/inventory.repository.js';

export type { StockAudit };

/** Reads a SKU's books straight from Postgres, bypassing the service; the SKU must exist. */
export async function auditSku(db: Db, sku: string): Promise<StockAudit> {
  const audit = await auditStock(db, sku);
  if (!audit) throw new Error(`no SKU ${sku}`);
  return audit;
}

/**
 * What is wrong with a SKU's books, if anything: `available + reserved + sold = stock`, the view's running totals
 * equal to the ledger's, every unit of an ended order returned exactly once, no live order given anything back, no
 * segment negative, every order with its ledger.
 */
export function booksViolations(audit: StockAudit): string[] {
  const wrong: string[] = [];
  const check = (ok: boolean, what: string) => ok || wrong.push(`${what}: ${JSON.stringify(audit)}`);
  check(audit.totalStock === audit.additions, 'stock differs from the additions log');
  check(audit.available + audit.reserved + audit.sold === audit.totalStock, 'available + reserved + sold ≠ stock');
  check(audit.soldCounted === audit.sold, 'running total of sold units differs from the ledger');
  check(audit.reservedCounted === audit.reserved, 'running total of reserved units differs from the ledger');
  check(audit.returned === audit.ended, 'units returned differ from the units of ended orders');
  check(audit.wrongReturns === 0, 'an order got back more than it took, or got units back while live');
  check(audit.negativeSegments === 0, 'a segment went negative');
  check(audit.ordersWithoutLedger === 0 && audit.ordersLedgerMismatch === 0, 'an order and its ledger disagree');
  return wrong;
}
