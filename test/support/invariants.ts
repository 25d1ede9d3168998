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
  return (await auditStocks(db, [sku])).get(sku);
}

/**
 * The books of several SKUs in one statement, by SKU name (a SKU that does not exist has no entry). Orders have no
 * index by SKU: the statement reads them once for all the SKUs, so checking hundreds of SKUs costs one pass over the
 * orders, not one per SKU.
 */
export async function auditStocks(db: Db, skus: string[]): Promise<Map<string, StockAudit>> {
  // The ids as a list the planner sees, so that it reads each table by its SKU index rather than whole.
  const found = await db
    .selectFrom('skus')
    .select('id')
    .where('sku', 'in', skus.length ? skus : [''])
    .execute();
  const ids = sql`any(${found.map((row) => row.id)}::int[])`;
  const { rows } = await sql<Record<keyof StockAudit | 'sku', string | number>>`
    with s as (
      select * from skus where id = ${ids}
    ), taken as (
      select d.sku_id, d.order_id, o.status, sum(d.quantity) as quantity
        from stock_deductions d cross join lateral (select status from orders where id = d.order_id) o
       where d.sku_id = ${ids}
       group by d.sku_id, d.order_id, o.status
    ), back as (
      select sku_id, order_id, sum(quantity) as quantity from stock_returns
       where sku_id = ${ids} group by sku_id, order_id
    ), confirmed as (
      -- Confirmed reservations' units: still in the segments' reserved, counted as sold apart.
      select sku_id, sum(units)::bigint as units from reservation_confirmations
       where sku_id = ${ids} group by sku_id
    ), additions as (
      select sku_id, sum(quantity) as quantity from stock_additions where sku_id = ${ids} group by sku_id
    ), segments as (
      select sku_id, sum(available) as available, sum(sold) as sold, sum(reserved) as reserved,
             count(*) filter (where available < 0) as negative
        from stock_segments where sku_id = ${ids} group by sku_id
    ), by_status as (
      select sku_id, sum(quantity) filter (where status = 'confirmed') as sold,
             sum(quantity) filter (where status = 'reserved') as reserved,
             sum(quantity) filter (where status in ('cancelled', 'expired')) as ended, count(*) as orders
        from taken group by sku_id
    ), order_ledgers as (
      select o.sku_id, o.quantity, d.rows, d.ledger from orders o
       cross join lateral (
         select count(*) as rows, coalesce(sum(quantity), 0) as ledger from stock_deductions where order_id = o.id) d
       where o.sku_id = ${ids}
    ), orders_wrong as (
      select sku_id, count(*) filter (where rows = 0) as without_ledger, count(*) filter (where quantity <> ledger)
             as mismatch
        from order_ledgers group by sku_id
    ), ledger_orphans as (
      select d.sku_id, count(*) as n from stock_deductions d
       where d.sku_id = ${ids} and not exists (select 1 from orders o where o.id = d.order_id)
       group by d.sku_id
    ), returns_wrong as (
      select b.sku_id, count(*) as n from back b join taken t using (order_id)
       where b.quantity > t.quantity or t.status in ('reserved', 'confirmed')
       group by b.sku_id
    ), returned as (
      select sku_id, sum(quantity) as quantity from back group by sku_id
    )
    select s.sku,
           s.total_stock as "totalStock",
           coalesce(a.quantity, 0)::bigint as "additions",
           coalesce(g.available, 0)::bigint as "available",
           coalesce(t.sold, 0)::bigint as "sold",
           coalesce(t.reserved, 0)::bigint as "reserved",
           s.sold_in_earlier_layouts + coalesce(g.sold, 0)::bigint + coalesce(c.units, 0) as "soldCounted",
           s.reserved_in_earlier_layouts + coalesce(g.reserved, 0)::bigint - coalesce(c.units, 0) as "reservedCounted",
           coalesce(r.quantity, 0)::bigint as "returned",
           coalesce(t.ended, 0)::bigint as "ended",
           coalesce(t.orders, 0)::int as "ledgerOrders",
           coalesce(g.negative, 0)::int as "negativeSegments",
           coalesce(w.without_ledger, 0)::int as "ordersWithoutLedger",
           coalesce(l.n, 0)::int as "ledgerWithoutOrder",
           coalesce(w.mismatch, 0)::int as "ordersLedgerMismatch",
           coalesce(x.n, 0)::int as "wrongReturns"
      from s
      left join additions a on a.sku_id = s.id
      left join segments g on g.sku_id = s.id
      left join by_status t on t.sku_id = s.id
      left join confirmed c on c.sku_id = s.id
      left join returned r on r.sku_id = s.id
      left join orders_wrong w on w.sku_id = s.id
      left join ledger_orphans l on l.sku_id = s.id
      left join returns_wrong x on x.sku_id = s.id`.execute(db);
  return new Map(
    rows.map(({ sku, ...row }) => [
      String(sku),
      Object.fromEntries(Object.entries(row).map(([k, v]) => [k, Number(v)])) as unknown as StockAudit,
    ]),
  );
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
