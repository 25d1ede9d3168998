import { type RawBuilder, sql } from 'kysely';
import type { Db } from '../db/database.js';

// The one books checker: a SKU's books read straight from Postgres (readBooks), and what is off in them
// (booksProblems). The background audit (./books-audit.ts), the tests and the load test all check books with these.

/**
 * A SKU's books straight from Postgres. Books are exact when `totalStock = additions`,
 * `available + reserved + sold = totalStock`, the counted totals equal the ledger's, and every count of wrongs is 0.
 */
export interface Books {
  /**
   * `skus.total_stock`, and the same from the additions log (signed: adjustments and counts that removed units are
   * negative rows): they must agree.
   */
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

/**
 * A SKU's books, by name or id, in one statement (one snapshot, so a change committing meanwhile is seen whole or not
 * at all). Every read goes through an index on the SKU: its segments, additions, ledger rows, returns, confirmation
 * counters and orders (`orders_sku_idx`), and each order's own ledger rows by its key; so the cost is that SKU's own
 * orders, whatever the other SKUs have sold.
 */
export async function readBooks(db: Db, sku: string | number): Promise<Books | undefined> {
  const { rows } = await booksStatement(sku).execute(db);
  const row = rows[0];
  return row && (Object.fromEntries(Object.entries(row).map(([k, v]) => [k, Number(v)])) as unknown as Books);
}

/** The statement of `readBooks`; exported for the test of its plan. */
export function booksStatement(sku: string | number): RawBuilder<Record<keyof Books, string | number>> {
  const target = typeof sku === 'number' ? sql`id = ${sku}` : sql`sku = ${sku}`;
  // Each order is looked up by its key from the SKU's ledger rows, and each of the SKU's orders' ledger rows by theirs,
  // in subqueries Postgres runs per row (an aggregate in a lateral or scalar subquery is never turned into a join):
  // a join here may be planned as a hash join over the whole of the other table when the SKU has many orders.
  return sql<Record<keyof Books, string | number>>`
    with target as (select id from skus where ${target}), taken as (
      -- The SKU's ledger by order, with the order's status (null: no such order).
      select d.order_id, count(*) as ledger_rows, sum(d.quantity) as quantity,
             (select o.status from orders o where o.id = d.order_id) as status
        from stock_deductions d where d.sku_id = (select id from target)
       group by d.order_id
    ), own_orders as (
      -- The SKU's orders (not carts), each with all of its ledger rows.
      select o.quantity, l.quantity as ledger, l.rows as ledger_rows
        from orders o cross join lateral (
          select coalesce(sum(d.quantity), 0) as quantity, count(*) as rows
            from stock_deductions d where d.order_id = o.id) l
       where o.sku_id = (select id from target)
    ), back as (
      select order_id, sum(quantity) as quantity from stock_returns
       where sku_id = (select id from target) group by order_id
    ), confirmed as (
      -- Confirmed reservations' units: still in the segments' reserved, counted as sold apart.
      select coalesce(sum(units), 0)::bigint as units from reservation_confirmations
       where sku_id = (select id from target)
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
           (select count(*) from taken where status is not null)::int as "ledgerOrders",
           (select count(*) from stock_segments where sku_id = s.id and available < 0)::int as "negativeSegments",
           (select count(*) from own_orders where ledger_rows = 0)::int as "ordersWithoutLedger",
           (select coalesce(sum(ledger_rows), 0) from taken where status is null)::int as "ledgerWithoutOrder",
           (select count(*) from own_orders where quantity <> ledger)::int as "ordersLedgerMismatch",
           (select count(*) from back b join taken t using (order_id)
             where b.quantity > t.quantity or t.status in ('reserved', 'confirmed'))::int as "wrongReturns"
      from skus s where s.id = (select id from target)`;
}

/** One thing off in a SKU's books: which check failed (a stable name) and the figures that disagree. */
export interface BooksProblem {
  check: BooksCheck;
  detail: string;
}

export type BooksCheck =
  | 'stock_equals_additions'
  | 'units_add_up'
  | 'sold_matches_ledger'
  | 'reserved_matches_ledger'
  | 'returns_match_ended_orders'
  | 'no_excess_returns'
  | 'no_negative_segment'
  | 'orders_match_ledger';

/**
 * What is off in a SKU's books, if anything: stock equal to the additions log, `available + reserved + sold = stock`,
 * the view's running totals equal to the ledger's, every unit of an ended order returned exactly once, no live order
 * given anything back, no segment negative, every order equal to its ledger rows and every ledger row with its order.
 */
export function booksProblems(b: Books): BooksProblem[] {
  const problems: BooksProblem[] = [];
  const check = (ok: boolean, name: BooksCheck, detail: string) => ok || problems.push({ check: name, detail });
  check(b.totalStock === b.additions, 'stock_equals_additions', `stock ${b.totalStock} ≠ Σ additions ${b.additions}`);
  check(
    b.available + b.reserved + b.sold === b.totalStock,
    'units_add_up',
    `available ${b.available} + reserved ${b.reserved} + sold ${b.sold} = ${b.available + b.reserved + b.sold} ≠ stock ${b.totalStock}`,
  );
  check(b.soldCounted === b.sold, 'sold_matches_ledger', `running sold ${b.soldCounted} ≠ ledger's ${b.sold}`);
  check(
    b.reservedCounted === b.reserved,
    'reserved_matches_ledger',
    `running reserved ${b.reservedCounted} ≠ ledger's ${b.reserved}`,
  );
  check(
    b.returned === b.ended,
    'returns_match_ended_orders',
    `units returned ${b.returned} ≠ units of ended orders ${b.ended}`,
  );
  check(
    b.wrongReturns === 0,
    'no_excess_returns',
    `${b.wrongReturns} orders got back more than they took, or units while live`,
  );
  check(b.negativeSegments === 0, 'no_negative_segment', `${b.negativeSegments} segments below 0`);
  check(
    b.ordersWithoutLedger === 0 && b.ledgerWithoutOrder === 0 && b.ordersLedgerMismatch === 0,
    'orders_match_ledger',
    `${b.ordersLedgerMismatch} orders ≠ their ledger rows, ${b.ordersWithoutLedger} without ledger rows, ` +
      `${b.ledgerWithoutOrder} ledger rows without their order`,
  );
  return problems;
}
