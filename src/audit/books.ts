import { type RawBuilder, sql } from 'kysely';
import type { Db } from '../db/database.js';

// The one books checker: a SKU's books read straight from Postgres (readBooks: the whole of them; readRecentBooks: its
// running totals and the orders named, for the audit's check of recent changes), and what is off in them
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
  return numbers((await booksStatement(sku).execute(db)).rows[0]);
}

/**
 * What a check of a SKU's recent changes reads: its running totals and segments, and only the orders named (those the
 * feed announced since the last check), by their keys. What it cannot see without the SKU's whole history (the
 * additions log's sum, the ledger's totals by status) is left to `readBooks`.
 */
export interface RecentBooks extends Pick<
  Books,
  | 'totalStock'
  | 'available'
  | 'soldCounted'
  | 'reservedCounted'
  | 'negativeSegments'
  | 'ordersWithoutLedger'
  | 'ledgerWithoutOrder'
  | 'ordersLedgerMismatch'
  | 'wrongReturns'
> {
  /** The orders named that have ledger rows on this SKU. */
  recentOrders: number;
}

/** SKUs whose recent books one statement reads: a pass's few hundred changed SKUs in a few round trips. */
const RECENT_SKUS_PER_STATEMENT = 100;

/**
 * SKUs' recent books (`RecentBooks`), by SKU id, from the orders named for each: O(their segments + those orders),
 * however long their ledgers. Every named order is looked up by its key, one at a time (aggregates in lateral
 * subqueries, which Postgres never turns into a join over the SKU's rows). Up to RECENT_SKUS_PER_STATEMENT SKUs go in
 * one statement: a round trip per SKU cost the service as much CPU as the check (each write to Postgres's socket is a
 * system call, and on loopback the receiver's side of it too). A SKU that no longer exists is left out.
 */
export async function readRecentBooks(
  db: Db,
  changed: ReadonlyMap<number, readonly string[]>,
): Promise<Map<number, RecentBooks>> {
  const books = new Map<number, RecentBooks>();
  const skus = [...changed];
  for (let at = 0; at < skus.length; at += RECENT_SKUS_PER_STATEMENT) {
    const { rows } = await recentBooksStatement(new Map(skus.slice(at, at + RECENT_SKUS_PER_STATEMENT))).execute(db);
    for (const row of rows) {
      const { skuId, ...recent } = numbers<RecentBooks & { skuId: number }>(row)!;
      books.set(skuId, recent);
    }
  }
  return books;
}

function numbers<T>(row: Record<string, string | number> | undefined): T | undefined {
  return row && (Object.fromEntries(Object.entries(row).map(([k, v]) => [k, Number(v)])) as T);
}

/** The SKU's running totals, from its row and segments (the same in both statements). */
const runningTotals = sql`
           s.total_stock as "totalStock",
           (select coalesce(sum(available), 0) from stock_segments where sku_id = s.id)::bigint as "available",
           s.sold_in_earlier_layouts + (select coalesce(sum(sold), 0) from stock_segments where sku_id = s.id)::bigint
             + (select units from confirmed) as "soldCounted",
           s.reserved_in_earlier_layouts
             + (select coalesce(sum(reserved), 0) from stock_segments where sku_id = s.id)::bigint
             - (select units from confirmed) as "reservedCounted",
           (select count(*) from stock_segments where sku_id = s.id and available < 0)::int as "negativeSegments",
           (select count(*) from own_orders where ledger_rows = 0)::int as "ordersWithoutLedger",
           (select coalesce(sum(ledger_rows), 0) from taken where status is null)::int as "ledgerWithoutOrder",
           (select count(*) from own_orders where quantity <> ledger)::int as "ordersLedgerMismatch",
           (select count(*) from back b join taken t using (order_id)
             where b.quantity > t.quantity or t.status in ('reserved', 'confirmed'))::int as "wrongReturns"`;

/** Confirmed reservations' units: still in the segments' reserved, counted as sold apart. */
const confirmedUnits = (skuId: RawBuilder<unknown>) => sql`
    confirmed as (
      select coalesce(sum(units), 0)::bigint as units from reservation_confirmations where sku_id = ${skuId}
    )`;

/** The statement of `readBooks`; exported for the test of its plan. */
export function booksStatement(sku: string | number): RawBuilder<Record<keyof Books, string | number>> {
  const target = typeof sku === 'number' ? sql`id = ${sku}` : sql`sku = ${sku}`;
  // By id (the audit's way), the id itself, so that Postgres plans each read for that SKU's rows (the ledger's
  // statistics of it) rather than for a SKU of average size, which on a ledger of few SKUs is a scan of the table.
  const skuId = typeof sku === 'number' ? sql`${sku}::int` : sql`(select id from target)`;
  // Each order is looked up by its key from the SKU's ledger rows, and each of the SKU's orders' ledger rows by theirs,
  // in subqueries Postgres runs per row (an aggregate in a lateral or scalar subquery is never turned into a join):
  // a join here may be planned as a hash join over the whole of the other table when the SKU has many orders.
  return sql<Record<keyof Books, string | number>>`
    with target as (select id from skus where ${target}), taken as (
      -- The SKU's ledger by order, with the order's status (null: no such order).
      select d.order_id, count(*) as ledger_rows, sum(d.quantity) as quantity,
             (select o.status from orders o where o.id = d.order_id) as status
        from stock_deductions d where d.sku_id = ${skuId}
       group by d.order_id
    ), own_orders as (
      -- The SKU's orders (not carts), each with all of its ledger rows.
      select o.quantity, l.quantity as ledger, l.rows as ledger_rows
        from orders o cross join lateral (
          select coalesce(sum(d.quantity), 0) as quantity, count(*) as rows
            from stock_deductions d where d.order_id = o.id) l
       where o.sku_id = ${skuId}
    ), back as (
      select order_id, sum(quantity) as quantity from stock_returns
       where sku_id = ${skuId} group by order_id
    ), ${confirmedUnits(skuId)}
    select ${runningTotals},
           (select coalesce(sum(quantity), 0) from stock_additions where sku_id = s.id)::bigint as "additions",
           (select coalesce(sum(quantity), 0) from taken where status = 'confirmed')::bigint as "sold",
           (select coalesce(sum(quantity), 0) from taken where status = 'reserved')::bigint as "reserved",
           (select coalesce(sum(quantity), 0) from back)::bigint as "returned",
           (select coalesce(sum(quantity), 0) from taken where status in ('cancelled', 'expired'))::bigint as "ended",
           (select count(*) from taken where status is not null)::int as "ledgerOrders"
      from skus s where s.id = (select id from target)`;
}

/** The statement of `readRecentBooks`, a row per SKU that exists (by id, with the ids of its orders to check); exported for the test of its plan. */
export function recentBooksStatement(
  changed: ReadonlyMap<number, readonly string[]>,
): RawBuilder<Record<keyof RecentBooks | 'skuId', string | number>> {
  return sql.join(
    [...changed].map(([skuId, orderIds]) => recentBooksOfSku(skuId, orderIds)),
    sql` union all `,
  );
}

function recentBooksOfSku(skuId: number, orderIds: readonly string[]): RawBuilder<unknown> {
  return sql`(
    with named as (select distinct id from unnest(${orderIds}::uuid[]) as n(id)), taken as (
      -- The named orders' ledger rows on this SKU, with the order's status (null: no such order).
      select n.id as order_id, l.rows as ledger_rows, l.quantity,
             (select o.status from orders o where o.id = n.id) as status
        from named n cross join lateral (
          select count(*) as rows, sum(d.quantity) as quantity
            from stock_deductions d where d.order_id = n.id and d.sku_id = ${skuId}) l
       where l.rows > 0
    ), own_orders as (
      -- The named orders of this SKU (not carts), each with all of its ledger rows.
      select o.quantity, l.quantity as ledger, l.rows as ledger_rows
        from named n cross join lateral (
          select o.id, o.quantity from orders o where o.id = n.id and o.sku_id = ${skuId} limit 1) o
        cross join lateral (
          select coalesce(sum(d.quantity), 0) as quantity, count(*) as rows
            from stock_deductions d where d.order_id = o.id) l
    ), back as (
      select n.id as order_id, r.quantity
        from named n cross join lateral (
          select sum(quantity) as quantity from stock_returns where order_id = n.id and sku_id = ${skuId}) r
       where r.quantity is not null
    ), ${confirmedUnits(sql`${skuId}`)}
    select ${runningTotals},
           (select count(*) from taken where status is not null)::int as "recentOrders", s.id as "skuId"
      from skus s where s.id = ${skuId})`;
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
 * Of recent books, what they can tell: the running totals adding up to the stock (`units_add_up` from the counters
 * instead of the ledger), no segment negative, and the named orders' ledger rows and returns.
 */
export function booksProblems(b: Books | RecentBooks): BooksProblem[] {
  const problems: BooksProblem[] = [];
  const check = (ok: boolean, name: BooksCheck, detail: string) => ok || problems.push({ check: name, detail });
  if ('recentOrders' in b) {
    const units = b.available + b.reservedCounted + b.soldCounted;
    check(
      units === b.totalStock,
      'units_add_up',
      `available ${b.available} + running reserved ${b.reservedCounted} + running sold ${b.soldCounted} = ${units} ≠ stock ${b.totalStock}`,
    );
  } else {
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
  }
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
