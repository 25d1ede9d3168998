import { sql } from 'kysely';
import type { Db } from '../../src/db/database.js';

// The one books checker: a SKU's books read straight from Postgres (auditStock), and what is wrong with them
// (booksViolations). The tests, the fault cases (fault-books.ts) and the load test all check books with these.

/**
 * A SKU's books straight from Postgres: what the tests and the load test check. Books are exact when
 * `totalStock = additions`, `available + reserved + sold = totalStock`, the counted totals equal the ledger's, and
 * every count of wrongs is 0.
 */
export interface StockAudit {
  /** `skus.total_stock`, and the same from the additions log: they must agree. */
  totalStock: number;
  additions: number;
  available: number;
  /** Σ ledger deductions of confirmed orders. */
  sold: number;
  /** Σ ledger deductions of live reservations. */
  reserved: number;
  /** The running totals the SKU view reads (earlier layouts + Σ segments): must equal `sold` and `reserved`. */
  soldCounted: number;
  reservedCounted: number;
  /** Σ units returned (`stock_returns`), and Σ deductions of cancelled and expired orders: they must agree. */
  returned: number;
  ended: number;
  ledgerOrders: number;
  negativeSegments: number;
  ordersWithoutLedger: number;
  /** Ledger rows whose order does not exist (the schema leaves this to the order path: no foreign key). */
  ledgerWithoutOrder: number;
  /** Orders whose quantity differs from the sum of their ledger rows. */
  ordersLedgerMismatch: number;
  /** Orders that got back more than they took, or got anything back while still live. */
  wrongReturns: number;
}

export async function auditStock(db: Db, sku: string): Promise<StockAudit | undefined> {
  const { rows } = await sql<Record<keyof StockAudit, string | number>>`
    with taken as (
      select d.order_id, o.status, sum(d.quantity) as quantity
        from stock_deductions d join orders o on o.id = d.order_id
       where d.sku_id = (select id from skus where sku = ${sku})
       group by d.order_id, o.status
    ), back as (
      select order_id, sum(quantity) as quantity from stock_returns
       where sku_id = (select id from skus where sku = ${sku}) group by order_id
    ), confirmed as (
      -- Confirmed reservations' units: still in the segments' reserved, counted as sold apart.
      select coalesce(sum(units), 0)::bigint as units from reservation_confirmations
       where sku_id = (select id from skus where sku = ${sku})
    )
    select s.total_stock as "totalStock",
           (select coalesce(sum(quantity), 0) from stock_additions where sku_id = s.id)::bigint as "additions",
           (select coalesce(sum(available), 0) from stock_segments where sku_id = s.id)::bigint as "available",
           (select coalesce(sum(quantity), 0) from taken where status = 'confirmed')::bigint as "sold",
           (select coalesce(sum(quantity), 0) from taken where status = 'reserved')::bigint as "reserved",
           s.sold_in_earlier_layouts + (select coalesce(sum(sold), 0) from stock_segments where sku_id = s.id)::bigint
             + (select units from confirmed) as "soldCounted",
           s.reserved_in_earlier_layouts
             + (select coalesce(sum(reserved), 0) from stock_segments where sku_id = s.id)::bigint
             - (select units from confirmed) as "reservedCounted",
           (select coalesce(sum(quantity), 0) from back)::bigint as "returned",
           (select coalesce(sum(quantity), 0) from taken where status in ('cancelled', 'expired'))::bigint as "ended",
           (select count(*) from taken)::int as "ledgerOrders",
           (select count(*) from stock_segments where sku_id = s.id and available < 0)::int as "negativeSegments",
           (select count(*) from orders o where o.sku_id = s.id
              and not exists (select 1 from stock_deductions d where d.order_id = o.id))::int as "ordersWithoutLedger",
           (select count(*) from stock_deductions d where d.sku_id = s.id
              and not exists (select 1 from orders o where o.id = d.order_id))::int as "ledgerWithoutOrder",
           (select count(*) from orders o where o.sku_id = s.id
              and o.quantity <> (select coalesce(sum(d.quantity), 0) from stock_deductions d where d.order_id = o.id))::int
             as "ordersLedgerMismatch",
           (select count(*) from back b join taken t using (order_id)
             where b.quantity > t.quantity or t.status in ('reserved', 'confirmed'))::int as "wrongReturns"
      from skus s where s.sku = ${sku}`.execute(db);
  const row = rows[0];
  return row && (Object.fromEntries(Object.entries(row).map(([k, v]) => [k, Number(v)])) as unknown as StockAudit);
}

/** Reads a SKU's books straight from Postgres, bypassing the service; the SKU must exist. */
export async function auditSku(db: Db, sku: string): Promise<StockAudit> {
  const audit = await auditStock(db, sku);
  if (!audit) throw new Error(`no SKU ${sku}`);
  return audit;
}

/**
 * What is wrong with a SKU's books, if anything: `available + reserved + sold = stock`, the view's running totals
 * equal to the ledger's, every unit of an ended order returned exactly once, no live order given anything back, no
 * segment negative, every order with its ledger and every ledger row with its order.
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
  check(
    audit.ordersWithoutLedger === 0 && audit.ledgerWithoutOrder === 0 && audit.ordersLedgerMismatch === 0,
    'an order and its ledger disagree',
  );
  return wrong;
}
