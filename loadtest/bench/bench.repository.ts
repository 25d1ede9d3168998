import { type RawBuilder, sql } from 'kysely';
import type { Db } from '../../src/db/database.js';

/** One sale as the benchmark routes write it: the order row and its single ledger row, on one segment. */
export interface BenchSale {
  orderId: string;
  skuId: number;
  layoutVersion: number;
  segment: number;
  quantity: number;
}

/**
 * The order and its ledger row, written only if the statement's first step (`step`, a CTE named `done`) returned a
 * row; true when it did. One statement, so no caller ever sees the order without its ledger row.
 */
async function withOrderAndLedger(
  db: Db,
  sale: BenchSale,
  step: RawBuilder<unknown>,
  fence: number | null = 0,
): Promise<boolean> {
  const { rows } = await sql<{ order_id: string }>`
    with done as (${step}),
    placed as (
      insert into orders (id, sku_id, quantity) select ${sale.orderId}::uuid, ${sale.skuId}, ${sale.quantity} from done limit 1
      returning id)
    insert into stock_deductions (order_id, sku_id, segment, layout_version, quantity, fence_token)
    select placed.id, ${sale.skuId}, ${sale.segment}, ${sale.layoutVersion}, ${sale.quantity}, ${fence ?? 0} from placed
    returning order_id`.execute(db);
  return rows.length === 1;
}

type SegmentRef = Pick<BenchSale, 'skuId' | 'layoutVersion' | 'segment'>;
const segmentOf = (sale: SegmentRef) =>
  sql`sku_id = ${sale.skuId} and layout_version = ${sale.layoutVersion} and segment = ${sale.segment}`;

/** The lock-free baseline: deducts only if enough stock is there (`available >= q`, decided under Postgres's row lock). */
export function sellIfAvailable(db: Db, sale: BenchSale): Promise<boolean> {
  const q = sale.quantity;
  return withOrderAndLedger(
    db,
    sale,
    sql`update stock_segments set available = available - ${q}, sold = sold + ${q}
    where ${segmentOf(sale)} and available >= ${q} returning sku_id`,
  );
}

/**
 * The write half of a read-decide-write: stores the stock the caller computed from its earlier read. With `fence` it
 * applies only if no later lock holder wrote the row (the product's rule); without, blindly, which is what loses
 * updates when nothing serialises the callers. False when the fence refused the write.
 */
export function writeDecidedSale(
  db: Db,
  sale: BenchSale & { availableAfter: number; fence: number | null },
): Promise<boolean> {
  const fenced = sale.fence === null ? sql`true` : sql`fence_token < ${sale.fence}`;
  return withOrderAndLedger(
    db,
    sale,
    sql`update stock_segments
    set available = ${sale.availableAfter}, fence_token = ${sale.fence ?? sql`fence_token`}, sold = sold + ${sale.quantity}
    where ${segmentOf(sale)} and ${fenced} returning sku_id`,
    sale.fence,
  );
}

/** The order, its ledger row and the segment's units sold: for the baseline that keeps the stock itself in Redis. */
export async function recordSale(db: Db, sale: BenchSale): Promise<void> {
  await withOrderAndLedger(
    db,
    sale,
    sql`update stock_segments set sold = sold + ${sale.quantity} where ${segmentOf(sale)} returning sku_id`,
  );
}

export function findBenchSku(db: Db, sku: string) {
  return db
    .selectFrom('skus')
    .select(['id', 'sku', 'segment_count', 'layout_version'])
    .where('sku', '=', sku)
    .executeTakeFirst();
}

/** The read half of a read-decide-write; undefined when the segment does not exist in that layout. */
export async function readSegmentStock(db: Db, ref: SegmentRef): Promise<number | undefined> {
  const { rows } = await sql<{
    available: string;
  }>`select available from stock_segments where ${segmentOf(ref)}`.execute(db);
  return rows[0] && Number(rows[0].available);
}

export async function availableOfSku(db: Db, skuId: number): Promise<number> {
  const { rows } = await sql<{
    available: string;
  }>`select coalesce(sum(available), 0) as available from stock_segments where sku_id = ${skuId}`.execute(db);
  return Number(rows[0]!.available);
}
